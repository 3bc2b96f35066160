"""Values a user can get wrong: each is refused with what to do, never a traceback, and
nothing is created on the way."""

import pytest
from conftest import run_cli, write_files


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("OLLAMA_HOST", "http://[bad", "Invalid IPv6 URL"),
        ("OLLAMA_HOST", "localhost:abc", "Port could not be cast to integer value as 'abc'"),
        ("OLLAMA_HOST", "http://host:99999", "Port out of range 0-65535"),
        ("QDRANT_URL", "http://user:secret@host:99999", "Port out of range 0-65535"),
        ("QDRANT_URL", "ftp://host", "it needs http:// or https:// and a host name"),
    ],
)
def test_a_malformed_server_address_is_refused_by_name(
    ollama, home, monkeypatch, variable, value, reason
):
    url = ollama.url
    if variable == "OLLAMA_HOST":
        url = value
    else:
        monkeypatch.setenv(variable, value)
    done = run_cli("stores", ollama_url=url, home=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"Error: {variable} is not an address Archivist can use: ")
    assert reason in done.stderr and f"Set {variable} to a URL like " in done.stderr
    assert "secret" not in done.stderr


def test_empty_questions_negative_overlaps_nan_scores_and_missing_paths_are_refused(
    ollama, home, tmp_path
):
    def refused(*args: str) -> str:
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        return done.stderr

    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    assert "chunk size 1000 with overlap -1" in refused(
        "ingest", str(root), "--store", "kb", "--chunk-overlap", "-1"
    )
    assert "does not exist" in refused("ingest", str(tmp_path / "nonexistent"), "--store", "kb")
    assert "No stores yet" in run_cli("stores", ollama_url=ollama.url, home=home).stdout
    assert (
        run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home).returncode
        == 0
    )
    assert "Error: The question is empty." in refused("ask", "  ", "--store", "kb")
    assert "Error: --min-score nan is not a score." in refused(
        "search", "alpha", "--store", "kb", "--min-score", "nan"
    )


def test_an_api_key_on_the_command_line_is_warned_about(home, tmp_path):
    done = run_cli(
        "migrate", "--to-home", str(tmp_path / "copy"), "--api-key", "k3y",
        ollama_url="http://127.0.0.1:9", home=home,
    )  # fmt: skip
    assert "visible to every user of this machine in the process list" in done.stderr
    assert "set QDRANT_API_KEY in the environment instead" in done.stderr
    assert "k3y" not in done.stderr + done.stdout
