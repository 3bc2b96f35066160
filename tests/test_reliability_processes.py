"""Processes that die or collide: an ingest killed with SIGKILL while it writes, and readers
and a second writer on the embedded store while an ingest runs.

Everything goes through the public interface (the CLI, as subprocesses where they die or
collide, `connect(path)` and KnowledgeStore), so these tests hold whatever engine sits behind
`archivist.tools.store.connect()`.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_cli, write_files
from fake_ollama import FakeOllama
from processes import INGEST, clean_ingest, corpus, start_ingest, stored_chunks, wait_for

from archivist.ingest.ahead import AHEAD_REQUESTS
from archivist.tools.store import KnowledgeStore, connect


def test_an_ingest_killed_with_sigkill_leaves_a_store_that_opens_and_finishes(tmp_path):
    root = corpus(tmp_path / "kb", files=200)  # more than is embedded ahead of the graph
    home = tmp_path / "home"
    with FakeOllama() as ollama:
        ingest = start_ingest(root, "kb", ollama.url, home)
        try:
            # Several batches stored and more being written: kill with no chance to clean up.
            # (Counted past the requests an ingest may send ahead of its graph, which come
            # before the store exists.)
            sent = lambda: len(ollama.requests_to("/api/embed"))  # noqa: E731
            wait_for(lambda: sent() >= AHEAD_REQUESTS + 12, "a dozen of the graph's batches")
            ingest.send_signal(signal.SIGKILL)
            ingest.wait(timeout=30)
        finally:
            ingest.kill()
        assert ingest.returncode == -signal.SIGKILL

        count, chunks = stored_chunks(home, "kb")
        assert count == len(chunks) > 0
        found = run_cli("search", "lantern tent", "--store", "kb", ollama_url=ollama.url, home=home)
        assert found.returncode == 0, found.stderr
        assert "doc" in found.stdout

        rerun = run_cli(
            "ingest", str(root), "--store", "kb", *INGEST, ollama_url=ollama.url, home=home
        )
        assert rerun.returncode == 0, rerun.stderr
        clean = clean_ingest(root, ollama.url, tmp_path / "clean")
    assert count < clean[0]
    assert stored_chunks(home, "kb") == clean


def test_while_an_ingest_runs_readers_get_through_and_a_second_writer_waits(tmp_path):
    root = corpus(tmp_path / "kb")
    extra = write_files(tmp_path / "extra", {"kayaks.md": "Kayak rental costs 40 euros a day."})
    home = tmp_path / "home"
    env = {**os.environ, "ARCHIVIST_HOME": str(home)}
    # The ingest's Ollama, whose one embedding slot the test takes, and everyone else's.
    # Slow embeddings (~10 s for the corpus), so chunks are stored well before the end.
    with FakeOllama(embed_delay_per_text=0.1, embed_concurrency=1) as ollama, FakeOllama() as other:
        env["OLLAMA_HOST"] = other.url
        ingest = start_ingest(root, "kb", ollama.url, home)
        try:
            # Take the fake's only embedding slot once chunks are stored: the ingest is held
            # half-way, its writer lock with it (the store's lease it gives up when asked).
            wait_for(lambda: _count(home) > 0, "the first chunks stored")
            ollama._embed_slots.acquire()
            readers = [
                run_cli(*args, ollama_url=other.url, home=home)
                for args in (["ask", "Which lantern?", "--store", "kb"], ["stores"])
            ]
            refused = run_cli(
                "ingest",
                str(extra),
                "--store",
                "kb",
                "--wait",
                "0",
                ollama_url=ollama.url,
                home=home,
            )
            second_err = tmp_path / "second.err"
            with second_err.open("w") as err_file:
                second = subprocess.Popen(
                    [sys.executable, "-m", "archivist", "ingest", str(extra), "--store", "kb"],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=err_file,
                    text=True,
                )
            try:
                wait_for(lambda: "Waiting for the store" in second_err.read_text(), "a notice")
                assert ingest.poll() is None and second.poll() is None
                ollama.embed_delay_per_text = 0.0  # what is left need not be slow
                ollama._embed_slots.release()
                out, err = ingest.communicate(timeout=120)
                second_out, _ = second.communicate(timeout=120)
            finally:
                second.kill()
        finally:
            ingest.kill()
        assert ingest.returncode == 0, err
        for reader in readers:
            assert reader.returncode == 0, reader.stderr
        # One that cannot wait is told who writes; one that can waits, saying for whom.
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        holder = f"being written by process {ingest.pid} (archivist ingest "
        assert holder in refused.stderr and "--wait" in refused.stderr
        assert holder in second_err.read_text()
        assert second.returncode == 0, second_err.read_text()
        assert "1 file stored" in second_out
        count, chunks = stored_chunks(home, "kb")
        assert count == len(chunks)
        sources = _sources(home)
        assert all(info.complete for info in sources.values())
        # Two roots now: each source is named with its root's label.
        assert set(sources) == {f"kb/doc{n:02}.md" for n in range(24)} | {"extra/kayaks.md"}


def _count(home: Path) -> int:
    client = connect(home / "edge")
    try:
        store = KnowledgeStore(client, "kb")
        return store.count() if store.exists() else 0
    finally:
        client.close()


def _sources(home: Path) -> dict:
    client = connect(home / "edge")
    try:
        return KnowledgeStore(client, "kb").sources()
    finally:
        client.close()
