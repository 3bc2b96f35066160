"""Processes that die or collide: an ingest killed with SIGKILL while it writes, and a second
process opening the embedded store while an ingest runs.

Everything goes through the public interface (the CLI, as subprocesses where they die or
collide, `connect(path)` and KnowledgeStore), so these tests hold whatever engine sits behind
`archivist.tools.store.connect()`.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import ROOT, run_cli
from fake_ollama import FakeOllama
from processes import INGEST, clean_ingest, corpus, start_ingest, stored_chunks, wait_for

from archivist.tools.store import KnowledgeStore, connect


def test_an_ingest_killed_with_sigkill_leaves_a_store_that_opens_and_finishes(tmp_path):
    root = corpus(tmp_path / "kb", files=60)
    home = tmp_path / "home"
    with FakeOllama() as ollama:
        ingest = start_ingest(root, "kb", ollama.url, home)
        try:
            # Several batches stored and more being written: kill with no chance to clean up.
            wait_for(lambda: len(ollama.requests_to("/api/embed")) >= 12, "a dozen batches")
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


def test_a_second_process_on_the_embedded_store_works_or_is_told_why(tmp_path):
    root = corpus(tmp_path / "kb")
    home = tmp_path / "home"
    env = {**os.environ, "ARCHIVIST_HOME": str(home)}
    with FakeOllama(embed_delay_per_text=0.05, embed_concurrency=1) as ollama:
        env["OLLAMA_HOST"] = ollama.url
        ingest = start_ingest(root, "kb", ollama.url, home)
        others = []
        try:
            # Chunk batches follow the model probe once the store is open; then take the fake's
            # only embedding slot, so the ingest is held half-way while the others run.
            wait_for(lambda: len(ollama.requests_to("/api/embed")) >= 2, "the first batch")
            ollama._embed_slots.acquire()
            for args in (
                ["ask", "Which lantern?", "--store", "kb"],
                ["ingest", str(root), "--store", "kb"],
                ["stores"],
            ):
                others.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "archivist", *args],
                        env=env,
                        cwd=ROOT,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            results = [(p.communicate(timeout=120), p.returncode) for p in others]
            assert ingest.poll() is None
            ollama._embed_slots.release()
            out, err = ingest.communicate(timeout=120)
        finally:
            for process in [ingest, *others]:
                process.kill()
        assert ingest.returncode == 0, err
        for (_, other_err), status in results:
            assert "Traceback" not in other_err
            if status != 0:
                assert status == 1
                assert "in use by another Archivist process" in other_err
                assert "QDRANT_URL" in other_err  # the way to share stores
        count, chunks = stored_chunks(home, "kb")
        assert count == len(chunks)
        assert all(info.complete for info in _sources(home).values())
        after = run_cli("ask", "Which lantern?", "--store", "kb", ollama_url=ollama.url, home=home)
        assert after.returncode == 0, after.stderr


def _sources(home: Path) -> dict:
    client = connect(home / "edge")
    try:
        return KnowledgeStore(client, "kb").sources()
    finally:
        client.close()
