"""Ollama failing under Archivist: killed mid-ingest and restarted, or hung without answering.

Ollama refusing connections at start: tests/test_ingest_cli.py and tests/test_cli.py; 5xx
answers retried with backoff, then a clean stop: tests/test_ingest_recovery.py; failing
mid-answer in the chat: tests/test_chat_interrupts.py.
"""

import socket

from conftest import run_cli
from processes import INGEST, FakeOllamaProcess, clean_ingest, corpus, start_ingest, stored_chunks


def test_ollama_killed_mid_ingest_then_restarted_a_rerun_matches_a_clean_ingest(tmp_path):
    root = corpus(tmp_path / "kb")
    fake = FakeOllamaProcess("--embed-delay-per-text", "0.02").start()
    ingest = start_ingest(root, "kb", fake.url, tmp_path / "home")
    try:
        # Progress lines reach stderr as sources are stored: kill Ollama after the first.
        first = ingest.stderr.readline()
        assert first.startswith("  stored doc"), first
        fake.kill()
        out, err = ingest.communicate(timeout=120)
    finally:
        ingest.kill()
        fake.kill()
    assert ingest.returncode == 1
    assert "Traceback" not in err
    assert "Ingest stopped" in err and "run the same command again to finish" in err

    # The same address, as a restarted Ollama; no longer slow, as nothing is to be cut short.
    fake.args = ()
    fake.start(fake.port)
    try:
        count, chunks = stored_chunks(tmp_path / "home", "kb")
        rerun = run_cli(
            "ingest",
            str(root),
            "--store",
            "kb",
            *INGEST,
            ollama_url=fake.url,
            home=tmp_path / "home",
        )
        assert rerun.returncode == 0, rerun.stderr
        assert "0 failed" in rerun.stdout
        clean = clean_ingest(root, fake.url, tmp_path / "clean")
    finally:
        fake.kill()
    assert 0 < count < clean[0]  # the first run really stopped half-way
    assert stored_chunks(tmp_path / "home", "kb") == clean  # no duplicate, no missing chunk


def test_a_hung_ollama_gives_a_timeout_message_not_a_hang(ollama, home, tmp_path, monkeypatch):
    root = corpus(tmp_path / "kb", files=2)
    assert (
        run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home).returncode
        == 0
    )
    monkeypatch.setenv("ARCHIVIST_TIMEOUT", "0.5")  # run_cli passes the environment on
    with socket.socket() as hung:  # accepts connections (the kernel's backlog), never answers
        hung.bind(("127.0.0.1", 0))
        hung.listen(16)
        url = f"http://127.0.0.1:{hung.getsockname()[1]}"
        for args in (
            ["ask", "Which lantern?", "--store", "kb"],
            ["search", "lantern", "--store", "kb"],
        ):
            done = run_cli(*args, ollama_url=url, home=home)
            assert done.returncode == 1, done.stderr
            assert "Traceback" not in done.stderr
            assert f"Ollama at {url} did not answer within 0.5 s." in done.stderr
            assert "raise ARCHIVIST_TIMEOUT" in done.stderr


def test_ask_and_chat_retry_a_busy_ollama_visibly(ollama, store, home, monkeypatch):
    monkeypatch.setattr("archivist.models.CHAT_BACKOFF", 0.01)
    question = "How many days for a refund?"
    # Every third chat request fails, as a busy Ollama's do: each ask still answers.
    for _ in range(4):
        ollama.fail("/api/chat", 500, "server busy", times=1, after=2)
    notices = []
    for _ in range(5):
        asked = run_cli("ask", question, "--store", store, ollama_url=ollama.url, home=home)
        assert asked.returncode == 0, asked.stderr
        assert "Sources: [1]" in asked.stdout
        notices += [line for line in asked.stderr.splitlines() if "trying again" in line]
    # The first ask's two requests pass; each later ask has one refused and tried again.
    assert len(ollama.requests_to("/api/chat")) == 2 + 4 * 3
    assert (
        notices
        == ["Ollama answered with an error (server busy); trying again in 0.01 s (retry 1 of 3)."]
        * 4
    )

    ollama.fail("/api/chat", 500, "server busy", times=2)
    chatted = run_cli(
        "chat", "--store", store, stdin=f"{question}\n/exit\n", ollama_url=ollama.url, home=home
    )
    assert chatted.returncode == 0 and "Sources: [1]" in chatted.stdout
    assert "trying again in 0.01 s (retry 1 of 3)" in chatted.stderr
    assert "trying again in 0.02 s (retry 2 of 3)" in chatted.stderr

    # Requests that keep failing end with the reason, as before.
    ollama.fail("/api/chat", 500, "server busy", times=4)
    failed = run_cli("ask", question, "--store", store, ollama_url=ollama.url, home=home)
    assert failed.returncode == 1
    assert "answered with an error: server busy" in failed.stderr
    assert failed.stderr.count("trying again") == 3 and "Traceback" not in failed.stderr
