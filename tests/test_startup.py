"""Each command imports what it uses when it uses it: on the embedded store, `stores`,
`sources` and `logs` load neither qdrant-client nor LangChain nor LangGraph, `search`
needs the store, its query's embedding and the ranking, nothing else, and an `ingest` or
`sync` with nothing to do builds no graph. Imports belong to a
process, so each command runs as one (`python -X importtime` lists what it loaded)."""

import json
import os
import subprocess
import sys

import pytest
from conftest import SHOP

# What these commands never need on the embedded store: the server client (its models are
# built with pydantic at import, ~1 s of CPU), LangChain, LangGraph, the Ollama client,
# pydantic itself (~0.3 s) and httpx (~0.2 s: it loads its own command line's libraries).
HEAVY = {
    "qdrant_client",
    "pydantic",
    "httpx",
    "langchain",
    "langchain_core",
    "langchain_ollama",
    "langgraph",
    "langsmith",
    "ollama",
}


def _run(args: list[str], ollama_url: str, home) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run `archivist ARGS` as a process; return it and the modules it imported, each with its
    packages (`archivist.ingest.web` adds `archivist`, `archivist.ingest` and itself)."""
    env = {**os.environ, "OLLAMA_HOST": ollama_url, "ARCHIVIST_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "archivist", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    imported = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            parts = line.rsplit("|", 1)[1].strip().split(".")
            imported.update(".".join(parts[: n + 1]) for n in range(len(parts)))
    return done, imported


@pytest.mark.parametrize(
    ("args", "shows"),
    [
        (["stores"], "shop_docs\t"),
        (["sources", "--store", "shop_docs"], "refund.md\t"),
        (["logs"], "No turns logged yet."),
        (["search", "How many days for a refund?", "--store", "shop_docs"], "[1] "),
        (["ingest", str(SHOP), "--store", "shop_docs"], "0 chunks embedded"),
        (["sync"], "0 files stored"),
    ],
    ids=["stores", "sources", "logs", "search", "unchanged-ingest", "unchanged-sync"],
)
def test_a_command_on_the_embedded_store_imports_only_what_it_uses(
    args, shows, store, ollama, home
):
    done, imported = _run(args, ollama.url, home)
    assert shows in done.stdout
    assert imported & HEAVY == set()
    assert "qdrant_edge" in imported or args == ["logs"]
    # No file is read, no page fetched: no format's loader, no crawler.
    readers = {m for m in imported if m.startswith("archivist.ingest.loaders.")}
    assert readers <= {"archivist.ingest.loaders.base"}
    assert "archivist.ingest.web" not in imported
    # One request on a socket to a plain-HTTP Ollama: no http.client, ssl or e-mail parser
    # (~40 ms); progress events (~17 ms) only where they are rendered (an ingest's progress).
    assert imported & {"http.client", "ssl", "email"} == set()
    if args[0] in ("stores", "sources", "logs", "search"):
        assert "archivist.tools.progress" not in imported


def test_search_sends_the_query_as_the_model_factory_does(store, ollama, home):
    ollama.clear_requests()
    done, _ = _run(["search", "refund days", "--store", "shop_docs", "--json"], ollama.url, home)
    [body] = ollama.requests_to("/api/embed")
    # The store's model and query prefix, and `truncate: false` (an over-long query is refused).
    assert body == {
        "model": "nomic-embed-text",
        "input": ["search_query: refund days"],
        "truncate": False,
    }
    results = json.loads(done.stdout)
    assert results[0]["rank"] == 1 and results[0]["source"].endswith(".md")


def test_a_command_that_answers_loads_the_agent(store, ollama, home):
    # The check can fail: `ask` runs the agent graph, which needs LangGraph and the chat model.
    _, imported = _run(["ask", "How many days for a refund?"], ollama.url, home)
    assert {"langgraph", "langchain_ollama"} <= imported


# The program's exit skips the interpreter's teardown; what an exit must do still happens.
_EXIT_SCRIPT = """
import atexit, sys, threading, time
mark = sys.argv[1]
atexit.register(lambda: open(mark, "w").write("handlers ran"))
if sys.argv[2] == "thread":
    def later():
        time.sleep(0.3)
        open(mark + ".thread", "w").write("thread ended")
    threading.Thread(target=later).start()
sys.argv = ["archivist", *sys.argv[3:]]
from archivist.cli import run
run()
"""


@pytest.mark.parametrize("thread", ["none", "thread"])
def test_the_program_exits_with_its_status_output_and_exit_handlers(thread, store, home, tmp_path):
    mark = tmp_path / "mark"
    env = {**os.environ, "ARCHIVIST_HOME": str(home)}
    ok = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(mark), thread,
         "sources", "--store", store, "--json"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert {row["source"] for row in json.loads(ok.stdout)} >= {"refund.md"}  # all of it, flushed
    assert mark.read_text() == "handlers ran"
    # A thread still running is waited for, as Python's own exit does.
    assert (tmp_path / "mark.thread").exists() == (thread == "thread")
    failed = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT, str(mark), thread, "sources", "--store", "nope"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert failed.returncode == 1
    assert "There is no store named 'nope'." in failed.stderr
