"""Ollama failing under Archivist: killed mid-ingest and restarted, or hung without answering.

Ollama refusing connections at start: tests/test_ingest_cli.py and tests/test_cli.py; 5xx
answers retried with backoff, then a clean stop: tests/test_ingest_recovery.py; failing
mid-answer in the chat: tests/test_chat_interrupts.py.
"""

import base64
import json
import re
import socket
import time
from pathlib import Path

import pytest
from conftest import run_cli
from fake_ollama import ModelSpec
from processes import INGEST, FakeOllamaProcess, clean_ingest, corpus, start_ingest, stored_chunks

from archivist.ollama import embeddings


def test_ollama_killed_mid_ingest_then_restarted_a_rerun_matches_a_clean_ingest(tmp_path):
    root = corpus(tmp_path / "kb")
    fake = FakeOllamaProcess("--embed-delay-per-text", "0.02").start()
    # Its retries of the dead Ollama wait 0.05 s, 0.1 s, 0.1 s in place of 1 s, 2 s, 4 s.
    ingest = start_ingest(root, "kb", fake.url, tmp_path / "home", backoff=0.05)
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
    monkeypatch.setattr("archivist.ollama.transport.BACKOFF", 0.01)
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


# An Ollama (or a proxy in front of it) that misbehaves: the fake's fault switches
# (FakeOllama.misbehave, fail, require_auth, ModelSpec.served_length).


def _ingested(ollama, home, tmp_path, store="kb") -> Path:
    root = corpus(tmp_path / store, files=2)
    done = run_cli("ingest", str(root), "--store", store, ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    return root


def _refused(done, *words: str) -> None:
    """The command failed with a message (each of `words` in it), not a traceback."""
    assert done.returncode == 1, (done.stdout, done.stderr)
    # An unexpected exception reaches the user as "Error: SomeError: ..." (or a traceback).
    assert "Traceback" not in done.stderr, done.stderr
    assert not re.search(r"Error: [\w.]+(Error|Exception)\b", done.stderr), done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_an_ollama_dripping_a_byte_at_a_time_is_cut_at_the_timeout(
    ollama, home, tmp_path, monkeypatch
):
    root = _ingested(ollama, home, tmp_path)
    monkeypatch.setenv("ARCHIVIST_TIMEOUT", "0.5")
    # A byte every 0.05 s: each read is quick, so httpx's own timeouts never trip, but the
    # answers take minutes (an embedding's is ~15 KB, headers included).
    timeout = f"Ollama at {ollama.url} did not answer within 0.5 s."
    (root / "new.md").write_text("A new lantern manual.\n")
    commands = {
        "/api/embed": [
            ["search", "lantern", "--store", "kb"],
            ["ingest", str(root), "--store", "kb"],
            ["ask", "Which lantern?", "--store", "kb"],
        ],
        "/api/chat": [["ask", "Which lantern?", "--store", "kb"]],
        "/api/show": [["ask", "Which lantern?", "--store", "kb"], ["doctor"]],
    }
    for path, runs in commands.items():
        ollama.behave()
        ollama.misbehave(path, "drip")
        for args in runs:
            started = time.monotonic()
            done = run_cli(*args, ollama_url=ollama.url, home=home)
            elapsed = time.monotonic() - started
            if args == ["doctor"]:
                assert "did not answer within 0.5 s" in done.stdout, done.stdout
                assert "ollama pull" not in done.stdout
            else:
                _refused(done, timeout, "raise ARCHIVIST_TIMEOUT")
            # Cut at the timeout, headers and body alike (its retries and the process's
            # start-up besides), not after the minutes the drip would take.
            assert elapsed < 4, (args, elapsed)
    ollama.behave()
    assert (
        run_cli("search", "lantern", "--store", "kb", ollama_url=ollama.url, home=home).returncode
        == 0
    )


def test_a_streamed_answer_may_outlast_the_timeout_while_its_tokens_keep_coming(
    ollama, store, home, monkeypatch
):
    monkeypatch.setenv("ARCHIVIST_TIMEOUT", "1")
    ollama.script(
        "qwen2.5:3b",
        {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund"}}]},
    )
    ollama.script(
        "qwen2.5:3b", {"content": "Refunds are given within thirty days of the purchase [1]"}
    )
    ollama.token_delay = 0.25  # 12 tokens: 3 s in all, never 1 s between two
    done = run_cli(
        "ask", "How many days for a refund?", "--store", store, ollama_url=ollama.url, home=home
    )
    assert done.returncode == 0, done.stderr
    assert "Refunds are given within thirty days of the purchase [1]" in done.stdout

    ollama.token_delay = 1.5  # a stream that stalls longer than the timeout is cut
    ollama.script(
        "qwen2.5:3b",
        {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund"}}]},
    )
    done = run_cli(
        "ask", "How many days for a refund?", "--store", store, ollama_url=ollama.url, home=home
    )
    _refused(done, "did not answer within 1 s")


@pytest.mark.parametrize("fault", ["not_json", "empty", "nan"])
def test_answers_that_are_not_ollamas_get_a_message_not_a_traceback(fault, ollama, home, tmp_path):
    root = _ingested(ollama, home, tmp_path)
    (root / "new.md").write_text("A new lantern manual.\n")
    not_api = f"What answers at {ollama.url} is not speaking Ollama's API"
    for path, args in [
        ("/api/embed", ["search", "lantern", "--store", "kb"]),
        ("/api/embed", ["ingest", str(root), "--store", "kb"]),
        ("/api/chat", ["ask", "Which lantern?", "--store", "kb"]),
        ("/api/show", ["ask", "Which lantern?", "--store", "kb"]),
    ]:
        if fault == "nan" and path == "/api/show":
            continue  # the show answer has no number the client reads as one
        ollama.behave()
        ollama.misbehave(path, fault)
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        _refused(done, not_api, path, "Check that OLLAMA_HOST is Ollama's own address")
    ollama.behave()
    # Nothing of the refused answers was stored: the new file is stored by the next run.
    done = run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 0 and "1 file stored, 2 unchanged" in done.stdout, done.stdout


def test_vectors_of_another_size_are_refused_before_a_store_is_made(ollama, home, tmp_path):
    # The model's file was replaced: Ollama declares 768 dimensions, the answers have 384.
    ollama.add_model(
        ModelSpec("nomic-embed-text:latest", ["embedding"], context_length=2048, served_length=384)
    )
    root = corpus(tmp_path / "kb", files=1)
    done = run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home)
    _refused(
        done,
        "The embedding model 'nomic-embed-text' answered vectors of 384 dimensions, but "
        "Ollama lists it as 768-dimensional",
        "ollama pull nomic-embed-text",
    )
    stores = run_cli("stores", "--json", ollama_url=ollama.url, home=home)
    assert json.loads(stores.stdout) == []


def test_a_model_that_changed_size_under_a_store_gets_the_stores_message(ollama, home, tmp_path):
    root = _ingested(ollama, home, tmp_path)
    (root / "new.md").write_text("A new lantern manual.\n")
    # Another model pulled under the same name, declaring its own size: the store's 768
    # no longer fit (the engine would say only "Vector dimension error").
    ollama.add_model(ModelSpec("nomic-embed-text:latest", ["embedding"], embedding_length=384))
    embeddings.DECLARED.clear()  # what a new process knows
    for args in (["search", "lantern", "--store", "kb"], ["ingest", str(root), "--store", "kb"]):
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        _refused(
            done,
            "Store 'kb' holds 768-dimension vectors made by 'nomic-embed-text', but the "
            "embedding model gives 384-dimension ones",
            "ollama pull nomic-embed-text",
        )
        assert "Vector dimension error" not in done.stderr


def test_a_port_that_resets_connections_is_retried_then_named(ollama, store, home, monkeypatch):
    monkeypatch.setattr("archivist.ollama.transport.BACKOFF", 0.01)
    question = "How many days for a refund?"
    ollama.misbehave("/api/embed", "reset", times=1)
    ollama.misbehave("/api/chat", "reset", times=1)
    asked = run_cli("ask", question, "--store", store, ollama_url=ollama.url, home=home)
    assert asked.returncode == 0, asked.stderr
    assert "Sources: [1]" in asked.stdout
    # Each retry is announced with its reason: the chat's, and the query embedding's.
    retries = [line for line in asked.stderr.splitlines() if "retry 1" in line]
    assert len(retries) == 2 and all("onnection" in line for line in retries), asked.stderr
    searched_before = len(ollama.requests_to("/api/embed"))
    ollama.misbehave("/api/embed", "reset", times=1)
    found = run_cli("search", "refund", "--store", store, ollama_url=ollama.url, home=home)
    assert found.returncode == 0 and "refund" in found.stdout.lower(), found.stderr
    assert len(ollama.requests_to("/api/embed")) == searched_before + 2

    ollama.misbehave("/api/embed", "reset")  # every time
    done = run_cli("search", "refund", "--store", store, ollama_url=ollama.url, home=home)
    _refused(done, f"The connection to Ollama at {ollama.url} was cut", "resetting connections")


def test_intermittent_server_errors_retry_the_query_embedding_as_the_chat(
    ollama, store, home, monkeypatch
):
    monkeypatch.setattr("archivist.ollama.transport.BACKOFF", 0.01)
    question = "How many days for a refund?"
    # A model swapped in and out of memory: every other embedding request fails.
    for _ in range(3):
        ollama.fail("/api/embed", 500, "llama runner process has terminated", times=1, after=1)
    notices = []
    for _ in range(3):
        asked = run_cli("ask", question, "--store", store, ollama_url=ollama.url, home=home)
        assert asked.returncode == 0, asked.stderr
        assert "Sources: [1]" in asked.stdout
        notices += [line for line in asked.stderr.splitlines() if "retry" in line]
    # The first ask's request passes; each later one is refused once and sent again.
    assert len(ollama.requests_to("/api/embed")) == 1 + 2 * 2
    assert len(notices) == 2, notices
    assert all("llama runner process has terminated" in n and "retry 1" in n for n in notices)
    ollama.fail("/api/embed", 503, "server busy", times=1)
    found = run_cli("search", "refund", "--store", store, ollama_url=ollama.url, home=home)
    assert found.returncode == 0, found.stderr
    # Errors that outlast the retries end with the reason.
    ollama.fail("/api/embed", 500, "server busy", times=4)
    done = run_cli("search", "refund", "--store", store, ollama_url=ollama.url, home=home)
    _refused(done, "answered with an error: server busy")


def test_credentials_in_ollama_host_go_with_every_request_and_never_show(ollama, home, tmp_path):
    from io import StringIO

    from rich.console import Console

    from archivist.ollama import Ollama, pull
    from archivist.serving import graphs as server
    from archivist.settings import Settings

    ollama.require_auth("ann", "s3cr:t@pw")
    port = ollama.url.rsplit(":", 1)[1]
    url = f"http://ann:s3cr%3At%40pw@127.0.0.1:{port}"
    masked = f"http://***@127.0.0.1:{port}"
    root = corpus(tmp_path / "kb", files=2)
    outputs = []
    for args in (
        ["ingest", str(root), "--store", "kb"],
        ["search", "lantern", "--store", "kb"],
        ["ask", "Which lantern?", "--store", "kb"],
        ["chat", "--store", "kb"],
        ["doctor"],
    ):
        done = run_cli(*args, ollama_url=url, home=home, stdin="Which lantern?\n/exit\n")
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        outputs.append(done.stdout + done.stderr)
    settings = Settings(ollama_host=url, home=home)
    assert Ollama(settings).missing(["qwen2.5:3b", "nomic-embed-text"]) == []
    pull.pull_with_progress(settings, "all-minilm", Console(file=StringIO()))
    server.run_setup(server.ServerContext(ollama_host=url, home=str(home), stores=["kb"]))
    server.release_setups()

    paths = {request["path"] for request in ollama.requests}
    assert {"/api/show", "/api/embed", "/api/chat", "/api/version", "/api/pull"} <= paths
    unauthorized = [
        r["path"] for r in ollama.requests if r["authorization"] != _basic("ann", "s3cr:t@pw")
    ]
    assert unauthorized == []
    assert masked in outputs[-1]
    assert not any("s3cr" in out for out in outputs)


def test_refused_credentials_are_named_and_no_pull_is_advised(ollama, home, store):
    ollama.require_auth("ann", "right")
    port = ollama.url.rsplit(":", 1)[1]
    wrong = f"http://ann:wrong@127.0.0.1:{port}"
    doctor = run_cli("doctor", ollama_url=wrong, home=home)
    assert doctor.returncode == 1
    assert (
        f"Ollama at http://***@127.0.0.1:{port} refused the credentials in OLLAMA_HOST "
        "(401 Unauthorized)" in doctor.stdout
    )
    assert "ollama pull" not in doctor.stdout and "wrong" not in doctor.stdout
    for args in (
        ["ask", "Which lantern?", "--store", store],
        ["search", "lantern", "--store", store],
    ):
        done = run_cli(*args, ollama_url=wrong, home=home)
        _refused(done, "refused the credentials in OLLAMA_HOST")
        assert "ollama pull" not in done.stderr and "wrong" not in done.stderr
    bare = run_cli("search", "lantern", "--store", store, ollama_url=ollama.url, home=home)
    _refused(bare, "asks for credentials (401 Unauthorized)", "http://USER:PASSWORD@host:port")


def _basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
