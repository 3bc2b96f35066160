"""Nothing leaves the machine unless asked: LangSmith tracing, when on, is said out loud."""

import json

import pytest
from conftest import run_cli
from langsmith import run_trees
from langsmith import utils as langsmith_utils

from archivist.settings import DEFAULT_LANGSMITH_ENDPOINT, load_settings, mask_url

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


RUNS_ENDPOINTS = [
    json.dumps({"https://eu.smith.example/": "key-1", "https://us.smith.example": "key-2"}),
    json.dumps([{"api_url": "https://ann:pw@smith.internal/", "api_key": "k"}]),
    json.dumps(
        [
            {"api_url": "https://a.example", "api_key": 3},
            {"api_url": "https://b.example", "api_key": "k"},
        ]
    ),
    "not JSON",
    json.dumps("https://a.example"),
]


@pytest.mark.parametrize("runs", RUNS_ENDPOINTS)
def test_the_notice_names_the_runs_endpoints_traces_really_go_to(runs, monkeypatch):
    monkeypatch.setattr(run_trees.logger, "disabled", True)  # its warnings on bad values
    written = [r["api_url"] for r in run_trees._parse_write_replicas_from_env_var(runs)]
    tracing = load_settings({"LANGSMITH_TRACING": "true", "LANGSMITH_RUNS_ENDPOINTS": runs}).tracing
    # Where LangSmith writes runs (its own parser), masked; the default when it ignores them.
    expected = [mask_url(url) for url in written] or [DEFAULT_LANGSMITH_ENDPOINT]
    assert tracing.endpoint == ", ".join(expected)
    assert "pw" not in tracing.notice()
    if written:
        assert f"sent to LangSmith at {expected[0]}" in tracing.notice()


@pytest.mark.parametrize("value", ["True", "TRUE", "1", "yes"])
def test_a_tracing_switch_langsmith_does_not_read_is_warned_about(value, ollama, home, monkeypatch):
    monkeypatch.setenv("LANGSMITH_TRACING", value)
    langsmith_utils.get_env_var.cache_clear()
    try:
        assert langsmith_utils.tracing_is_enabled() is False  # LangSmith: off
    finally:
        langsmith_utils.get_env_var.cache_clear()
    warning = (
        "Tracing is off: LangSmith turns it on only for LANGSMITH_TRACING=true (lowercase), "
        f"not LANGSMITH_TRACING={value}."
    )
    done = run_cli("stores", ollama_url=ollama.url, home=home)
    assert done.returncode == 0 and done.stderr.count(warning) == 1, done.stderr
    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert doctor.returncode == 0 and f"! {warning}" in doctor.stdout, doctor.stdout
