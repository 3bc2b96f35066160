"""A new store's first files embedded while the ingest graph's imports load
(`archivist.ingest.ahead`), and the embedder queue taking those answers."""

import time
from collections import Counter

import pytest
from conftest import run_cli, write_files
from samples import make_pdf

from archivist.app import Archivist
from archivist.ingest import ahead as ahead_module
from archivist.ingest.embedder import EmbedQueue, EmbedSettings
from archivist.ingest.graph import DIMENSION_PROBE

pytestmark = pytest.mark.embed_ahead


def notes(root, count=30):
    """Files of a few chunks each (at a small chunk size), every chunk's text its own."""
    return write_files(
        root,
        {
            f"note-{i:02}.md": "\n\n".join(
                f"## Part {j}\n\nParcel {i}-{j} ships on day {i * 7 + j} from dock {j}."
                for j in range(4)
            )
            for i in range(count)
        },
    )


def ahead_first(monkeypatch, requests: int) -> list:
    """Have each EmbedAhead started get `requests` requests answered before the ingest goes
    on, as the imports' time gives it in a process; return the EmbedAheads started."""
    started = []
    start = ahead_module.EmbedAhead.start

    def start_and_wait(*args, **kwargs):
        ahead = start(*args, **kwargs)
        started.append(ahead)
        deadline = time.monotonic() + 60
        while ahead is not None and len(ahead._vectors) < requests * 4:
            assert time.monotonic() < deadline, "nothing sent ahead"
            time.sleep(0.01)
        return ahead

    monkeypatch.setattr(ahead_module.EmbedAhead, "start", staticmethod(start_and_wait))
    monkeypatch.setattr(ahead_module, "graph_imported", lambda: False)
    return started


def stored(app: Archivist, store: str) -> set:
    return {(c["source"], c["chunk_index"], c["text"]) for c in app.store(store).chunks()}


def inputs(ollama) -> list[str]:
    return [text for body in ollama.requests_to("/api/embed") for text in body["input"]]


def test_a_new_store_takes_the_vectors_sent_ahead_and_sends_no_text_twice(
    archivist, ollama, tmp_path, monkeypatch
):
    docs = notes(tmp_path / "docs")
    started = ahead_first(monkeypatch, requests=3)
    report = archivist.ingest([str(docs)], "kb", batch_size=4, chunk_size=80, chunk_overlap=0)
    assert len(started) == 1 and started[0].sent >= 3
    bodies = [body["input"] for body in ollama.requests_to("/api/embed")]
    assert all(texts in bodies for texts in started[0].requests)
    assert len(bodies) > started[0].sent  # the graph's own requests
    sent = Counter(inputs(ollama))
    assert all(n == 1 for n in sent.values()), [t for t, n in sent.items() if n > 1]
    # Every chunk stored once, and the store is what a run without the ahead makes.
    assert report.points == len(sent) - 1  # the dimension probe is no chunk
    monkeypatch.setattr(ahead_module, "graph_imported", lambda: True)
    plain = Archivist(archivist.settings)
    plain.ingest([str(docs)], "plain", batch_size=4, chunk_size=80, chunk_overlap=0)
    assert stored(archivist, "kb") == stored(plain, "plain")
    kb_vectors = {p.payload["text"]: p.vector for p in _points(archivist, "kb")}
    plain_vectors = {p.payload["text"]: p.vector for p in _points(plain, "plain")}
    assert kb_vectors == plain_vectors
    plain.close()


def _points(app: Archivist, store: str) -> list:
    found, _ = app._client.scroll(store, limit=1000, with_payload=True, with_vectors=True)
    return found


def test_a_request_sent_ahead_that_fails_is_sent_again_by_the_graph(
    archivist, ollama, tmp_path, monkeypatch
):
    docs = notes(tmp_path / "docs", count=12)
    ollama.fail("/api/embed", 500, "model is loading", times=1)  # the first one sent ahead
    started = ahead_first(monkeypatch, requests=1)
    report = archivist.ingest([str(docs)], "kb", batch_size=4, chunk_size=80, chunk_overlap=0)
    assert started[0].sent >= 1 and report.failed == []
    failed = ollama.requests_to("/api/embed")[0]["input"]
    sent = Counter(inputs(ollama))
    assert all(sent[text] == 2 for text in failed)  # refused ahead, then sent by the graph
    chunks = {text for _, _, text in stored(archivist, "kb")}
    assert report.points == len(chunks) == len(sent) - 1
    assert {t.removeprefix("search_document: ") for t in failed} <= {
        t.removeprefix("search_document: ") for t in sent
    }


def test_no_ahead_for_a_store_that_exists_or_a_run_whose_imports_are_loaded(
    archivist, ollama, tmp_path, monkeypatch
):
    docs = notes(tmp_path / "docs", count=4)
    monkeypatch.setattr(ahead_module, "graph_imported", lambda: True)
    archivist.ingest([str(docs)], "kb")
    monkeypatch.setattr(ahead_module, "graph_imported", lambda: False)
    started = []
    start = ahead_module.EmbedAhead.start
    monkeypatch.setattr(
        ahead_module.EmbedAhead,
        "start",
        staticmethod(lambda *a, **k: started.append(1) or start(*a, **k)),
    )
    write_files(docs, {"new.md": "# New\n\nA new note about parcels."})
    archivist.ingest([str(docs)], "kb")  # a store that exists: its unchanged files are skipped
    assert started == []


def test_the_child_reads_only_quick_files_and_leaves_pdfs_to_the_graph(
    archivist, ollama, tmp_path, monkeypatch
):
    docs = notes(tmp_path / "docs", count=12)
    # First in the graph's order: a PDF, which the child passes over.
    (docs / "a-manual.pdf").write_bytes(make_pdf([["Pallet manual: stack crates four high."]]))
    started = ahead_first(monkeypatch, requests=2)
    report = archivist.ingest([str(docs)], "kb", batch_size=4, chunk_size=80, chunk_overlap=0)
    assert report.failed == [] and started[0].sent >= 2
    bodies = [body["input"] for body in ollama.requests_to("/api/embed")]
    ahead = started[0].requests
    by_child = [t for texts in bodies if texts in ahead for t in texts]
    by_graph = [t for texts in bodies if texts not in ahead for t in texts]
    assert not any("Pallet manual" in t for t in by_child)
    assert any("Pallet manual" in t for t in by_graph)
    assert any("Parcel 0-0" in t for t in by_child)
    sent = Counter(by_child + by_graph)
    assert all(n == 1 for n in sent.values())


class Answering:
    """Embeddings that hold the answers of some texts (as ahead of the graph) and record the
    requests they make for the others."""

    def __init__(self, held: set[str]) -> None:
        self.held, self.made = held, []

    def answered(self, texts):
        return [[1.0]] * len(texts) if set(texts) <= self.held else None

    def embed_documents(self, texts):
        self.made.append(list(texts))
        return [[2.0]] * len(texts)


def test_requests_answered_ahead_take_no_thread_so_the_next_one_is_sent_at_once():
    embeddings = Answering({f"held {i}" for i in range(12)})
    queue = EmbedQueue(embeddings, EmbedSettings(concurrency=1), held=embeddings)
    for i in range(0, 12, 2):  # six requests answered ahead: more than the four a thread holds
        queue.submit(("held", i), [f"held {i}", f"held {i + 1}"])
    queue.submit(("new", 0), ["new 0", "new 1"])
    deadline = time.monotonic() + 30
    while not embeddings.made:  # sent before any result is taken
        assert time.monotonic() < deadline
        time.sleep(0.01)
    taken = list(queue.results(keep=0))
    assert [key for key, _ in taken] == [("held", i) for i in range(0, 12, 2)] + [("new", 0)]
    assert taken[0][1] == [[1.0], [1.0]] and taken[-1][1] == [[2.0], [2.0]]
    assert embeddings.made == [["new 0", "new 1"]]
    queue.close()


def test_a_first_ingest_run_as_a_process_embeds_ahead_of_its_graph(ollama, home, tmp_path):
    docs = notes(tmp_path / "docs", count=60)
    done = run_cli(
        "ingest", str(docs), "--store", "kb", "--batch-size", "4", "--chunk-size", "80",
        "--chunk-overlap", "0", "--json",
        ollama_url=ollama.url, home=home, process=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Chunks were sent ahead of the graph's first request (its dimension probe).
    bodies = [body["input"] for body in ollama.requests_to("/api/embed")]
    assert bodies.index([f"search_document: {DIMENSION_PROBE}"]) > 0
    sent = Counter(inputs(ollama))
    assert sent[f"search_document: {DIMENSION_PROBE}"] == 1
    assert all(n == 1 for n in sent.values())
