"""Nothing leaves the machine unless asked: LangSmith tracing, when on, is said out loud."""

import pytest
from conftest import run_cli
from langsmith import utils as langsmith_utils

from archivist.settings import DEFAULT_LANGSMITH_ENDPOINT, load_settings

ENVIRONMENTS = [
    {},
    {"LANGSMITH_TRACING": "true"},
    {"LANGCHAIN_TRACING_V2": "true"},
    {"LANGSMITH_TRACING": "false"},
    {"LANGSMITH_TRACING": "True"},
    {"LANGSMITH_TRACING": "1"},
    {"LANGSMITH_TRACING_V2": "false", "LANGSMITH_TRACING": "true"},
    {"LANGCHAIN_TRACING_V2": "true", "LANGSMITH_TRACING": "false"},
    {"LANGSMITH_TRACING_V2": " ", "LANGCHAIN_TRACING": "true"},
]


@pytest.mark.parametrize("env", ENVIRONMENTS)
def test_tracing_is_read_as_langsmith_reads_it(env, monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    langsmith_utils.get_env_var.cache_clear()
    try:
        traced = langsmith_utils.tracing_is_enabled() is True
    finally:
        langsmith_utils.get_env_var.cache_clear()
    assert (load_settings(env).tracing is not None) == traced


def test_the_endpoint_and_project_are_named():
    default = load_settings({"LANGSMITH_TRACING": "true"}).tracing
    assert (default.variable, default.endpoint, default.project) == (
        "LANGSMITH_TRACING",
        DEFAULT_LANGSMITH_ENDPOINT,
        "default",
    )
    tracing = load_settings(
        {
            "LANGCHAIN_TRACING_V2": "true",
            "LANGCHAIN_ENDPOINT": "https://user:secret@smith.internal/",
            "LANGSMITH_PROJECT": "archivist-dev",
        }
    ).tracing
    assert tracing.endpoint == "https://***@smith.internal" and tracing.project == "archivist-dev"
    assert "secret" not in tracing.notice() and "Unset LANGCHAIN_TRACING_V2" in tracing.notice()


def test_a_command_says_once_where_traces_go(ollama, home, monkeypatch):
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", "http://127.0.0.1:9")  # discard: nothing listens
    # Processes: LangSmith caches what it read of the environment for the process's life.
    done = run_cli("stores", "--json", ollama_url=ollama.url, home=home, process=True)
    assert done.returncode == 0 and done.stdout.strip() == "[]"
    assert done.stderr.count("Tracing is on (LANGSMITH_TRACING=true)") == 1
    assert "sent to LangSmith at http://127.0.0.1:9 (project 'default')" in done.stderr
    assert "Unset LANGSMITH_TRACING to keep everything on this machine." in done.stderr

    doctor = run_cli("doctor", ollama_url=ollama.url, home=home, process=True)
    assert doctor.returncode == 0, doctor.stdout  # a warning, not a failure
    assert "! LangSmith tracing is on (LANGSMITH_TRACING=true)" in doctor.stdout
    assert "sent to http://127.0.0.1:9" in doctor.stdout
    assert "unset LANGSMITH_TRACING" in doctor.stdout


def test_with_tracing_off_nothing_is_said(ollama, home):
    done = run_cli("stores", ollama_url=ollama.url, home=home)
    assert done.returncode == 0 and done.stderr == ""
    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert "✓ LangSmith tracing is off" in doctor.stdout
