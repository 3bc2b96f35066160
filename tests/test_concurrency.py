"""Readers and writers side by side on one embedded store: an open chat, searches from other
processes, ingests (one finishing, one killed with SIGKILL), all on the same home."""

import json
import signal

from chat_terminal import ask, leave, spawn_chat
from conftest import copy_home, run_cli, write_files
from fake_ollama import FakeOllama
from processes import INGEST, start_ingest, stored_chunks, wait_for

from archivist.tools.store import KnowledgeStore, connect

STORE = "shop_docs"
KAYAK_Q = "How much does kayak rental cost?"
KAYAKS = {
    "kayaks.md": "# Kayaks\n\nKayak rental costs 40 euros a day, paddle and life vest included."
}


def _search(query: str, ollama, home, store: str = "shop_docs") -> list[dict]:
    done = run_cli("search", query, "--store", store, "--json", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_an_open_chat_sees_what_an_ingest_stores_while_others_search(ollama, home, store, tmp_path):
    child = spawn_chat("--store", store, ollama_url=ollama.url, home=home)
    try:
        before = ask(child, KAYAK_Q)
        assert "search_shop_docs" in before and "kayaks.md" not in before
        # The chat sits at its prompt, having used the store; other processes go ahead.
        assert "kayaks.md" not in {r["source"] for r in _search("kayak rental", ollama, home)}
        added = run_cli(
            "ingest",
            str(write_files(tmp_path / "new", KAYAKS)),
            "--store",
            store,
            ollama_url=ollama.url,
            home=home,
        )
        assert added.returncode == 0, added.stderr
        assert "1 file stored" in added.stdout
        # A second root: the store's sources are named with their root's label now.
        assert _search("kayak rental", ollama, home)[0]["source"] == "new/kayaks.md"
        # The chat's next question finds the new document, without a restart.
        after = ask(child, KAYAK_Q)
        assert "Sources: [1] new/kayaks.md" in after, after
        assert child.isalive()
    finally:
        status = leave(child)
    assert status == 0


def test_a_writer_killed_mid_document_leaves_an_open_chat_answering(home, sample_home, tmp_path):
    # One long document, four chunks an embedding request, one request served at a time.
    big = write_files(
        tmp_path / "big",
        {
            "manual.md": "\n\n".join(
                f"Section {i}. The stove manual says: prime the burner {i} times. " * 3
                for i in range(40)
            )
        },
    )
    copy_home(sample_home, home)  # the sample store, `shop_docs`, ingested once per run
    with FakeOllama(embed_concurrency=1) as ollama:
        ollama.embed_delay_per_text = 0.1  # from now on: the manual's ingest is the slow one
        child = spawn_chat("--store", STORE, ollama_url=ollama.url, home=home)
        try:
            assert "Sources: [1]" in ask(child, "How many days do I have to ask for a refund?")
            ingest = start_ingest(big, STORE, ollama.url, home)
            try:
                # The document takes ~4 s to embed: part of it is stored well before the end.
                wait_for(lambda: _stored(home, "big/manual.md") >= 4, "the first chunks stored")
                # Hold the fake's one embedding slot: the document cannot be finished.
                ollama._embed_slots.acquire()
                ingest.send_signal(signal.SIGKILL)
                ingest.wait(timeout=30)
            finally:
                ingest.kill()
                ollama._embed_slots.release()
            assert ingest.returncode == -signal.SIGKILL

            # The chat keeps answering; its searches leave the half-stored manual out.
            answered = ask(child, "How many times do I prime the stove burner?")
            assert "search_shop_docs" in answered and "manual.md" not in answered, answered
            assert "Sources: [1]" in ask(child, "How many days do I have to ask for a refund?")
        finally:
            status = leave(child)
        assert status == 0

        client = connect(home / "edge")
        try:
            kb = KnowledgeStore(client, STORE)
            manual = kb.sources()["big/manual.md"]
            assert 0 < manual.chunks < manual.expected_chunks and not manual.complete
            count, chunks = kb.count(), kb.chunks()
        finally:
            client.close()
        assert count == len(chunks)  # consistent: every stored chunk readable
        found = _search("prime the stove burner", ollama, home, STORE)
        assert found and "manual.md" not in {r["source"] for r in found}
        # The next ingest completes it, and then it is found.
        ollama.embed_delay_per_text = 0.0
        rerun = run_cli(
            "ingest", str(big), "--store", STORE, *INGEST, ollama_url=ollama.url, home=home
        )
        assert rerun.returncode == 0, rerun.stderr
        found = _search("prime the stove burner", ollama, home, STORE)
        assert found[0]["source"] == "big/manual.md"
    count, chunks = stored_chunks(home, STORE)
    assert count == len(chunks)
    assert sum(1 for source, _, _ in chunks if source == "big/manual.md") == manual.expected_chunks


def _stored(home, source: str) -> int:
    client = connect(home / "edge")
    try:
        kb = KnowledgeStore(client, STORE)
        info = kb.sources().get(source) if kb.exists() else None
        return info.chunks if info else 0
    finally:
        client.close()
