"""Secrets stay secret: the password in OLLAMA_HOST and QDRANT_API_KEY never appear in what
Archivist prints, logs or writes — answers, errors, `doctor`, the turn log, eval reports."""

from pathlib import Path

from conftest import run_cli, write_files

PASSWORD = "pw-7f3a9c1e"
API_KEY = "qk-51d0b6e2"


def with_password(url: str) -> str:
    return url.replace("http://", f"http://alice:{PASSWORD}@")


def leaks(done, *folders: Path) -> list[str]:
    """Where a secret shows: in the output, or in any file under the folders (SQLite too)."""
    found = []
    for secret in (PASSWORD, API_KEY):
        if secret in done.stdout + done.stderr:
            found.append(f"output of {done.args[3:5]}")
        for folder in folders:
            for path in folder.rglob("*"):
                if path.is_file() and secret.encode() in path.read_bytes():
                    found.append(str(path))
    return found


def test_credentials_never_reach_output_logs_or_reports(ollama, home, tmp_path, monkeypatch):
    monkeypatch.setenv("QDRANT_API_KEY", API_KEY)
    url = with_password(ollama.url)
    root = write_files(tmp_path / "kb", {"tents.md": "# Tents\n\nTents keep the rain out."})
    dataset = (
        write_files(
            tmp_path,
            {
                "cases.jsonl": '{"id": "t", "question": "What keeps the rain out?", '
                '"expect_tool": "search_kb", "expect_sources": ["tents.md"]}\n'
            },
        )
        / "cases.jsonl"
    )
    reports = tmp_path / "reports"
    runs = [
        ("ingest", str(root), "--store", "kb"),
        ("ask", "What keeps the rain out?", "--store", "kb", "--json"),
        ("chat", "--store", "kb"),
        ("doctor",),
        ("eval", str(dataset), "--store", "kb", "--out", str(reports)),
        ("logs", "show", "1", "--json"),
    ]
    for args in runs:
        done = run_cli(*args, ollama_url=url, home=home, stdin="Tents?\n")
        assert done.returncode == 0, (args, done.stderr)
        assert "***@127.0.0.1" in done.stdout + done.stderr or args[0] != "doctor"
        assert leaks(done, home, reports) == []
    assert ollama.requests_to("/api/chat")  # the answers really went through that host


def test_credentials_never_reach_error_messages(ollama, home, tmp_path, monkeypatch):
    root = write_files(tmp_path / "kb", {"tents.md": "# Tents\n\nTents keep the rain out."})
    assert (
        run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home).returncode
        == 0
    )
    write_files(root, {"boots.md": "# Boots\n\nBoots need wax."})
    down = with_password("http://127.0.0.1:9")
    for args in (
        ("ingest", str(root), "--store", "kb"),
        ("ask", "Tents?", "--store", "kb"),
        ("doctor",),
    ):
        done = run_cli(*args, ollama_url=down, home=home, stdin="Tents?\n")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert "http://***@127.0.0.1:9" in done.stdout + done.stderr
        assert leaks(done, home) == []
    # A Qdrant server that is not there, with its key: doctor and the commands say so, masked.
    monkeypatch.setenv("QDRANT_URL", f"http://qdrant:{API_KEY}@127.0.0.1:9")
    monkeypatch.setenv("QDRANT_API_KEY", API_KEY)
    for args in (("doctor",), ("stores",), ("ask", "Tents?", "--store", "kb")):
        done = run_cli(*args, ollama_url=down, home=home)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert (
            "Qdrant" in done.stdout + done.stderr and "***@127.0.0.1:9" in done.stdout + done.stderr
        )
        assert leaks(done, home) == []
