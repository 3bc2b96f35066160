"""Processes for the reliability tests: the CLI and the fake Ollama as subprocesses that can be
killed, and the store opened through its public interface (`connect(path)`, KnowledgeStore) as
any later process would, so the tests hold whatever engine sits behind
`archivist.tools.store.connect()`."""

import os
import subprocess
import sys
import time
from pathlib import Path

from conftest import ROOT, run_cli, write_files

from archivist.tools.store import KnowledgeStore, connect

FAKE = ROOT / "tests" / "fake_ollama.py"


def corpus(root: Path, files: int = 24) -> Path:
    """Files of three or four chunks each at --chunk-size 200."""
    return write_files(
        root,
        {
            f"doc{n:02}.md": "\n\n".join(
                f"Part {n}.{i}. " + f"Lantern {n} and tent {i} and boots. " * 5 for i in range(4)
            )
            for n in range(files)
        },
    )


INGEST = ("--chunk-size", "200", "--chunk-overlap", "0", "--batch-size", "4")


# Run as `python -m archivist` does, after the embedding retries' first wait is set to
# {backoff} s (doubling up to twice that) in place of the 1 s a user waits.
QUICK_RETRIES = """
import dataclasses
import archivist.ingest.embedder as embedder, archivist.ingest.graph as graph
plain = embedder.embed_with_retry
def quick(embeddings, texts, settings, on_retry=None):
    settings = dataclasses.replace(settings, backoff={backoff}, max_backoff=2 * {backoff})
    return plain(embeddings, texts, settings, on_retry)
embedder.embed_with_retry = graph.embed_with_retry = quick
from archivist.cli import main
main()
"""


def start_ingest(
    root: Path, store: str, url: str, home: Path, backoff: float | None = None
) -> subprocess.Popen:
    """`archivist ingest ROOT --store STORE` as a process; `backoff`: the seconds before the
    first retry of a failed embedding request, in place of the second a user waits."""
    env = {**os.environ, "OLLAMA_HOST": url, "ARCHIVIST_HOME": str(home)}
    command = ["-m", "archivist"]
    if backoff is not None:
        command = ["-c", QUICK_RETRIES.format(backoff=backoff)]
    return subprocess.Popen(
        [sys.executable, *command, "ingest", str(root), "--store", store, *INGEST],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition, what: str, limit: float = 60) -> None:
    """Poll until `condition()` holds (a guard against hanging, not a timed assertion)."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.02)


def stored_chunks(home: Path, store: str) -> tuple[int, set[tuple[str, int, str]]]:
    """Open the store as any later process would: its count and its (source, index, text)."""
    client = connect(home / "edge")
    try:
        store = KnowledgeStore(client, store)
        chunks = {(c["source"], c["chunk_index"], c["text"]) for c in store.chunks()}
        return store.count(), chunks
    finally:
        client.close()


def clean_ingest(root: Path, ollama_url: str, home: Path) -> tuple[int, set]:
    done = run_cli("ingest", str(root), "--store", "kb", *INGEST, ollama_url=ollama_url, home=home)
    assert done.returncode == 0, done.stderr
    return stored_chunks(home, "kb")


class FakeOllamaProcess:
    """tests/fake_ollama.py as a subprocess that can be killed and restarted on its port."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self, port: int = 0) -> "FakeOllamaProcess":
        self.process = subprocess.Popen(
            [sys.executable, str(FAKE), "--port", str(port), *self.args],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.process.stdout.readline()
        assert line.startswith("FAKE_OLLAMA_URL="), line
        self.url = line.strip().split("=", 1)[1]
        return self

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
