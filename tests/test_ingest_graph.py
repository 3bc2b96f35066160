import json

import pytest
from conftest import SHOP, write_files
from fake_ollama import FakeOllama
from langchain_core.embeddings import DeterministicFakeEmbedding
from samples import HTML_PAGE, broken_png_reason, make_docx, make_pdf

from archivist.app import Archivist
from archivist.ingest.embedder import EmbedSettings
from archivist.ingest.graph import IngestSteps, PendingDoc, build_ingest_graph, run_ingest
from archivist.ingest.loaders import load
from archivist.ingest.request import IngestRequest
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import content_hash, discover
from archivist.ollama import Ollama
from archivist.settings import Settings
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.errors import StoreMismatch
from archivist.tools.progress import Failed, Loaded
from archivist.tools.search import SearchRequest
from archivist.tools.store import Chunk, KnowledgeStore

DOCS = {
    "guide/refunds.md": "---\ntitle: Refunds\n---\n# Refunds\n\nRefunds are paid within 30 days.",
    "guide/shipping.md": "# Shipping\n\nStandard shipping takes 3 to 5 business days.",
    "notes.txt": "Plain text notes about the warranty: two years on all products.",
    "image.png": b"\x89PNG\r\n\x1a\n\0\0",
}


def ingest(archivist, paths, store="docs", prune=False, on_progress=None, **options):
    graph = build_ingest_graph(
        KnowledgeStore(archivist._client, store), archivist.embeddings, on_progress, batch_files=2
    )
    request = IngestRequest(tuple(str(p) for p in paths), store, prune=prune, **options)
    return run_ingest(graph, request)


def points(archivist, store="docs"):
    """Return every stored point's payload, by id."""
    found, offset = {}, None
    while True:
        batch, offset = archivist._client.scroll(store, limit=256, offset=offset)
        found.update({str(p.id): p.payload for p in batch})
        if offset is None:
            return found


def embedded_texts(ollama):
    return [t for body in ollama.requests_to("/api/embed") for t in body["input"]]


def test_the_graph_is_compiled_under_its_name(archivist):
    graph = build_ingest_graph(KnowledgeStore(archivist._client, "docs"), archivist.embeddings)
    assert graph.name == "ingest"
    assert {"prepare", "load_batch", "embed_and_store", "prune"} <= set(graph.get_graph().nodes)


def test_files_are_stored_with_relative_sources_and_metadata(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    report = ingest(archivist, [root])
    assert sorted(s["source"] for s in report.stored) == [
        "guide/refunds.md",
        "guide/shipping.md",
        "notes.txt",
    ]
    assert report.skipped == [{"source": "image.png", "reason": broken_png_reason()}]
    assert report.failed == []
    store = KnowledgeStore(archivist._client, "docs")
    results = store.search(
        archivist.embeddings.embed_query("refunds paid"), "refunds paid", SearchRequest(k=1)
    )
    top = results[0]
    assert top["source"] == "guide/refunds.md"
    assert top["metadata"]["title"] == "Refunds"
    assert top["metadata"]["headings"] == ["Refunds"]
    extracted = "# Refunds\n\nRefunds are paid within 30 days."
    assert extracted[top["metadata"]["start"] : top["metadata"]["end"]] == top["text"]


def test_a_file_given_directly_is_named_by_its_file_name(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    report = ingest(archivist, [root / "guide" / "shipping.md"])
    assert [s["source"] for s in report.stored] == ["shipping.md"]


def test_documents_and_queries_get_nomic_task_prefixes_on_the_wire(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha text."})
    ingest(archivist, [root])
    inputs = [text for body in ollama.requests_to("/api/embed") for text in body["input"]]
    assert "search_document: # A\n\nAlpha text." in inputs
    ollama.clear_requests()
    archivist.search("alpha", "docs")
    assert ollama.requests_to("/api/embed")[0]["input"] == ["search_query: alpha"]


def test_a_rerun_embeds_nothing_and_keeps_the_point_count(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    count = KnowledgeStore(archivist._client, "docs").count()
    ollama.clear_requests()
    report = ingest(archivist, [root])
    assert ollama.requests_to("/api/embed") == []
    assert len(report.unchanged) == 3 and report.stored == []
    assert KnowledgeStore(archivist._client, "docs").count() == count


def test_only_a_changed_file_is_re_embedded_and_its_old_chunks_go(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    (root / "notes.txt").write_text("The warranty now lasts three years.", encoding="utf-8")
    ollama.clear_requests()
    report = ingest(archivist, [root])
    embedded = [t for body in ollama.requests_to("/api/embed") for t in body["input"]]
    assert embedded == ["search_document: The warranty now lasts three years."]
    assert report.stored == [{"source": "notes.txt", "status": "updated", "chunks": 1}]
    store = KnowledgeStore(archivist._client, "docs")
    texts = [p.payload["text"] for p in store.client.scroll("docs", limit=100)[0]]
    assert "The warranty now lasts three years." in texts
    assert not any("two years" in t for t in texts)


def test_prune_removes_sources_that_no_longer_exist(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    (root / "notes.txt").unlink()
    report = ingest(archivist, [root])
    assert report.removed == []
    report = ingest(archivist, [root], prune=True)
    assert report.removed == ["notes.txt"]
    assert "notes.txt" not in KnowledgeStore(archivist._client, "docs").sources()


def test_the_store_is_created_with_the_models_real_dimension(archivist, ollama):
    ingest(archivist, [SHOP], store="shop")
    fingerprint = KnowledgeStore(archivist._client, "shop").fingerprint
    assert fingerprint["dimension"] == 768
    assert fingerprint["embed_model"] == "nomic-embed-text"
    assert fingerprint["document_prefix"] == "search_document: "


def test_a_store_is_queried_with_the_model_it_was_built_with(archivist, settings, ollama, tmp_path):
    ingest(archivist, [write_files(tmp_path / "kb", DOCS)])
    from archivist.app import Archivist

    other = Archivist(settings.with_overrides(embed_model="all-minilm"))
    other.__dict__["client"] = archivist._client
    ollama.clear_requests()
    found = other.search("refunds", "docs")
    assert found[0]["source"] == "guide/refunds.md"
    assert found == archivist.search("refunds", "docs")
    asked = ollama.requests_to("/api/embed")
    assert {r["model"] for r in asked} == {"nomic-embed-text"}
    assert asked[0]["input"] == ["search_query: refunds"]
    assert Ollama(settings).embeddings("all-minilm").document_prefix == ""


def test_every_format_is_stored_with_metadata_and_offsets_into_its_text(archivist, tmp_path):
    root = write_files(
        tmp_path / "kb",
        {
            "guide.md": "---\ntitle: Guide\ntags: [a, b]\n---\n# Guide\n\nRead this first.",
            "notes.txt": "Plain notes about the warranty.",
            "shipping.html": HTML_PAGE,
            "products.jsonl": '{"id": "p1", "text": "A boot."}\n{"id": "p2", "text": "A tent."}\n',
            "catalogue.json": json.dumps([{"name": "Lamp", "price": 24}]),
            "prices.csv": "id,name,price\nS1,Stove,59\n",
        },
    )
    (root / "handbook.pdf").write_bytes(
        make_pdf([["Refunds take 30 days."], ["Warranty lasts two years."]])
    )
    make_docx(root / "warranty.docx")
    report = ingest(archivist, [root])
    assert report.failed == [] and report.skipped == []
    assert sorted(s["source"] for s in report.stored) == [
        "catalogue.json",
        "guide.md",
        "handbook.pdf",
        "notes.txt",
        "prices.csv#S1",
        "products.jsonl#p1",
        "products.jsonl#p2",
        "shipping.html",
        "warranty.docx",
    ]
    stored = list(points(archivist).values())
    by_source = {}
    for p in stored:
        by_source.setdefault(p["source"], []).append(p)
    pdf = sorted(by_source["handbook.pdf"], key=lambda p: p["chunk_index"])
    assert [(p["metadata"]["page"], p["text"]) for p in pdf] == [
        (1, "Refunds take 30 days."),
        (2, "Warranty lasts two years."),
    ]
    assert by_source["guide.md"][0]["metadata"]["tags"] == ["a", "b"]
    assert by_source["prices.csv#S1"][0]["text"] == "id: S1. name: Stove. price: 59."
    assert by_source["catalogue.json"][0]["metadata"] == {
        "name": "Lamp",
        "price": 24,
        "headings": [],
        "start": 0,
        "end": 22,
    }
    # Every chunk's offsets slice its section's extracted text back to the chunk.
    for p in stored:
        path = root / p["source"].split("#")[0]
        sections = load(path)
        if "page" in p["metadata"]:
            sections = [s for s in sections if s.metadata["page"] == p["metadata"]["page"]]
        if "#" in p["source"]:
            sections = [s for s in sections if s.key == p["source"].split("#")[1]]
        texts = [s.text[p["metadata"]["start"] : p["metadata"]["end"]] for s in sections]
        assert p["text"] in texts, p["source"]


def test_records_with_ids_are_synced_one_by_one(archivist, ollama, tmp_path):
    records = [{"id": n, "text": f"Record number {n} about tents."} for n in (1, 2, 3)]
    path = tmp_path / "kb" / "data.jsonl"
    path.parent.mkdir()
    path.write_text("\n".join(json.dumps(r) for r in records), encoding="utf-8")
    ingest(archivist, [path.parent])
    records[1]["text"] = "Record number 2 is now about boots."
    path.write_text("\n".join(json.dumps(r) for r in records[:2]), encoding="utf-8")
    ollama.clear_requests()
    report = ingest(archivist, [path.parent], prune=True)
    assert embedded_texts(ollama) == ["search_document: Record number 2 is now about boots."]
    assert report.stored == [{"source": "data.jsonl#2", "status": "updated", "chunks": 1}]
    assert report.unchanged == ["data.jsonl#1"]
    assert report.removed == ["data.jsonl#3"]
    assert sorted(KnowledgeStore(archivist._client, "docs").sources()) == [
        "data.jsonl#1",
        "data.jsonl#2",
    ]


def test_a_file_that_breaks_keeps_its_stored_version_even_when_pruning(archivist, tmp_path):
    root = write_files(
        tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "b.jsonl": '{"id": 1, "text": "B"}'}
    )
    ingest(archivist, [root])
    (root / "a.md").write_bytes(b"\0\0 broken")
    (root / "b.jsonl").write_text("{not json", encoding="utf-8")
    report = ingest(archivist, [root], prune=True)
    assert [f["source"] for f in report.failed] == ["a.md", "b.jsonl"]
    assert report.removed == []
    assert sorted(KnowledgeStore(archivist._client, "docs").sources()) == ["a.md", "b.jsonl#1"]


def test_ingesting_with_another_embedding_model_is_refused(archivist, settings, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    other = Archivist(settings.with_overrides(embed_model="all-minilm"))
    other.__dict__["client"] = archivist._client
    with pytest.raises(StoreMismatch) as refused:
        other.ingest([str(root)], "docs")
    message = str(refused.value)
    assert "'nomic-embed-text'" in message and "'all-minilm'" in message
    assert "--reindex" in message


def test_chunks_are_sent_in_batches_asking_ollama_not_to_truncate(tmp_path, home):
    with FakeOllama(embed_delay=0.02) as fake:
        app = Archivist(Settings(ollama_host=fake.url, home=home))
        text = "\n\n".join(f"Paragraph {i} " + "word " * 50 for i in range(12))
        root = write_files(tmp_path / "kb", {"long.md": text, "short.md": "Short."})
        splitter = SplitterSettings(chunk_size=300, chunk_overlap=0)
        report = ingest(
            app, [root], splitter=splitter, embed=EmbedSettings(batch_size=3, concurrency=2)
        )
        app.close()
    chunks = report.chunks_embedded
    bodies = fake.requests_to("/api/embed")[1:]  # after the dimension probe
    assert chunks == 13
    # Two requests are in flight at once, so they may arrive in either order.
    assert sorted((len(b["input"]) for b in bodies), reverse=True) == [3, 3, 3, 3, 1]
    assert all(b["truncate"] is False for b in fake.requests_to("/api/embed"))
    assert 1 <= fake.peak_embed_concurrency <= 2


def test_input_the_embedder_refuses_fails_only_its_own_document(archivist, ollama, tmp_path):
    docs = {f"{name}.md": f"# {name}\n\nThe {name} page." for name in ("a", "b", "c", "d")}
    docs["c.md"] = "# c\n\nThe c page holds UNEMBEDDABLE text."
    root = write_files(tmp_path / "kb", docs)
    ollama.refuse_inputs_containing("UNEMBEDDABLE")
    report = ingest(archivist, [root], embed=EmbedSettings(batch_size=4, concurrency=1))
    assert [f["source"] for f in report.failed] == ["c.md"]
    assert report.failed[0]["reason"].startswith("embedding refused: failed to process inputs")
    assert sorted(s["source"] for s in report.stored) == ["a.md", "b.md", "d.md"]
    # One request held all four; refused, each document was sent again on its own.
    inputs = [len(b["input"]) for b in ollama.requests_to("/api/embed")[1:]]
    assert inputs == [4, 1, 1, 1, 1]
    assert KnowledgeStore(archivist._client, "docs").count() == 3


def test_small_documents_share_embedding_requests():
    from archivist.ingest.graph import _pack_batches
    from archivist.tools.store import Chunk

    def docs(sizes):
        return [
            PendingDoc(f"d{d}", "h", [Chunk(f"d{d}c{i}", f"d{d}", i) for i in range(n)], "new", 0.0)
            for d, n in enumerate(sizes)
        ]

    pending = docs([1, 1, 4, 1, 2])
    jobs = _pack_batches(pending, 3)
    assert [texts for _, texts in jobs] == [
        ["d0c0", "d1c0", "d2c0"],
        ["d2c1", "d2c2", "d2c3"],
        ["d3c0", "d4c0", "d4c1"],
    ]
    assert [segments for segments, _ in jobs] == [
        [("d0", 0, 1), ("d1", 0, 1), ("d2", 0, 1)],
        [("d2", 1, 4)],
        [("d3", 0, 1), ("d4", 0, 2)],
    ]
    # Until the last files are read, a partial request waits for the next documents' chunks.
    pending = docs([2, 2])
    jobs = _pack_batches(pending, 3, flush=False)
    assert [texts for _, texts in jobs] == [["d0c0", "d0c1", "d1c0"]]
    assert [d.sent for d in pending] == [2, 1]
    assert [texts for _, texts in _pack_batches(pending, 3)] == [["d1c1"]]
    assert [d.sent for d in pending] == [2, 2]


def test_a_large_record_file_is_read_in_slices_never_whole(archivist, monkeypatch, tmp_path):
    from archivist.ingest import graph as ingest_graph

    monkeypatch.setattr(ingest_graph, "RECORDS_PER_STEP", 4)
    lines = [json.dumps({"id": f"r{i}", "text": f"Record number {i}."}) for i in range(10)]
    write_files(tmp_path / "kb", {"a.md": "# A\n\nFirst file.", "records.jsonl": "\n".join(lines)})
    write_files(tmp_path / "kb", {"z.md": "# Z\n\nLast file."})
    loaded = []
    report = ingest(
        archivist,
        [tmp_path / "kb"],
        on_progress=lambda e: loaded.append(e) if isinstance(e, Loaded) else None,
    )
    assert len(report.stored) == 12 and report.failed == []
    # No step held more than one slice of the records (plus the one-chunk Markdown files).
    assert max(step.chunks for step in loaded) <= 5
    assert sorted(archivist.store("docs").sources()) == sorted(
        ["a.md", "z.md", *(f"records.jsonl#r{i}" for i in range(10))]
    )
    again = ingest(archivist, [tmp_path / "kb"], prune=True)
    assert again.stored == [] and again.removed == []
    assert len(again.unchanged) == 12


def test_a_bad_line_late_in_a_record_file_fails_it_and_the_rest_goes_on(
    archivist, monkeypatch, tmp_path
):
    from archivist.ingest import graph as ingest_graph

    monkeypatch.setattr(ingest_graph, "RECORDS_PER_STEP", 2)
    lines = [json.dumps({"id": f"r{i}", "text": f"Record {i}."}) for i in range(5)] + ["{bad"]
    write_files(tmp_path / "kb", {"records.jsonl": "\n".join(lines), "z.md": "# Z\n\nLast."})
    report = ingest(archivist, [tmp_path / "kb"])
    assert report.failed == [
        {
            "source": "records.jsonl",
            "reason": "invalid JSON on line 6: Expecting property name enclosed in double quotes",
        }
    ]
    assert "z.md" in {s["source"] for s in report.stored}


class RecordingStore:
    """The two writes `embed_and_store` makes, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def upsert(self, writes) -> None:
        assert all(w.sparse is None for w in writes)  # a small run: the store makes them
        indices = [w.chunk.chunk_index for w in writes]
        self.calls.append(("upsert", indices, len(writes), [w.doc_hash for w in writes]))

    def delete_stale(self, source: str, doc_hash: str) -> None:
        self.calls.append(("delete_stale", source, doc_hash))


class Refused(Exception):
    """What Ollama answers to input it cannot embed."""

    status_code = 400


class LengthEmbeddings(PrefixedEmbeddings):
    """Vectors of text lengths, recording each request's texts."""

    def __init__(self, refuse: str | None = None) -> None:
        super().__init__(DeterministicFakeEmbedding(size=4), "fake")
        self.requests: list[list[str]] = []
        self.refuse = refuse

    def embed_documents(self, texts):
        self.requests.append(list(texts))
        if self.refuse and any(self.refuse in t for t in texts):
            raise Refused("input too long")
        return [[float(len(t)), 1.0, 0.0, 0.0] for t in texts]


def _pending(source: str, texts: list[str], doc_hash: str = "h") -> PendingDoc:
    chunks = [Chunk(text, source, i) for i, text in enumerate(texts)]
    return PendingDoc(
        source=source,
        doc_hash=doc_hash,
        chunks=chunks,
        status="new",
        sent=0,
        stored=0,
        failed=False,
        loaded_at=1.0,
    )


def test_load_batch_alone_queues_changed_documents_and_passes_over_unchanged_ones(tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nalpha", "b.md": "# B\n\nbeta"})
    steps = IngestSteps(store=None, embeddings=None, batch_files=1)
    files = sorted(discover([root])[0], key=lambda f: f.source)
    request = IngestRequest()
    unchanged = content_hash(files[0].path, request.splitter)
    state = {"request": request, "files": files, "known": {"a.md": unchanged}, "position": 0}
    update = steps.load_batch(state)
    assert update["position"] == 2  # one file loaded; the unchanged one cost only its hash
    assert update["unchanged"] == ["a.md"] and update["present"] == ["a.md", "b.md"]
    [doc] = update["pending"]
    assert (doc.source, doc.status, doc.sent) == ("b.md", "new", 0)
    assert [c.text for c in doc.chunks] == ["# B\n\nbeta"]


def test_load_batch_alone_reports_a_file_it_cannot_read_and_goes_on(tmp_path):
    root = write_files(tmp_path / "kb", {"bad.pdf": b"not a pdf", "ok.md": "fine"})
    events = []
    steps = IngestSteps(store=None, embeddings=None, notify=events.append)
    files = sorted(discover([root])[0], key=lambda f: f.source)
    update = steps.load_batch(
        {"request": IngestRequest(), "files": files, "known": {}, "position": 0}
    )
    assert [f["source"] for f in update["failed"]] == ["bad.pdf"]
    assert update["settled"] == ["ok.md"]
    assert events[0] == Failed(**update["failed"][0])
    assert events[-1] == Loaded(files=2, unchanged=0, chunks=1, bytes=len("not a pdf") + 4)


def test_embed_and_store_alone_stores_every_chunk_before_removing_the_old_version():
    store = RecordingStore()
    embeddings = LengthEmbeddings()
    steps = IngestSteps(store, embeddings)
    docs = [_pending("a.md", ["one", "two", "three"], "ha"), _pending("b.md", ["four"], "hb")]
    request = IngestRequest(embed=EmbedSettings(batch_size=2, concurrency=1))
    state = {"request": request, "run": "r1", "files": [], "position": 0, "pending": docs}
    update = steps.embed_and_store(state)
    # Requests are packed across documents: [one, two], [three, four].
    assert embeddings.requests == [["one", "two"], ["three", "four"]]
    # One write per request, across documents; then the completed ones drop old versions.
    assert store.calls == [
        ("upsert", [0, 1], 2, ["ha", "ha"]),
        ("upsert", [2, 0], 2, ["ha", "hb"]),
        ("delete_stale", "a.md", "ha"),
        ("delete_stale", "b.md", "hb"),
    ]
    assert update["stored"] == [
        {"source": "a.md", "status": "new", "chunks": 3},
        {"source": "b.md", "status": "new", "chunks": 1},
    ]
    assert update["pending"] == [] and "r1" not in steps.runs  # the last step closes


def test_only_sources_the_store_held_when_the_run_began_have_old_versions_removed():
    store = RecordingStore()
    steps = IngestSteps(store, LengthEmbeddings())
    steps.resources("r1").held = {"a.md"}  # b.md is new to the store: nothing older to remove
    docs = [_pending("a.md", ["one"], "ha"), _pending("b.md", ["two"], "hb")]
    request = IngestRequest(embed=EmbedSettings(batch_size=4))
    state = {"request": request, "run": "r1", "files": [], "position": 0, "pending": docs}
    steps.embed_and_store(state)
    assert [c for c in store.calls if c[0] == "delete_stale"] == [("delete_stale", "a.md", "ha")]
    assert "r1" not in steps.runs  # forgotten with the run


def test_a_first_ingest_removes_nothing_and_a_second_removes_only_a_changed_files_old_version(
    archivist, tmp_path, monkeypatch
):
    removed = []
    real = KnowledgeStore.delete_stale

    def delete_stale(self, source, doc_hash):
        removed.append(source)
        real(self, source, doc_hash)

    monkeypatch.setattr(KnowledgeStore, "delete_stale", delete_stale)
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    assert removed == []
    (root / "notes.txt").write_text("The warranty now lasts three years.", encoding="utf-8")
    (root / "new.md").write_text("# New\n\nA new page.", encoding="utf-8")
    ingest(archivist, [root])
    assert removed == ["notes.txt"]


def test_embed_and_store_alone_fails_only_the_document_whose_input_is_refused():
    store = RecordingStore()
    embeddings = LengthEmbeddings(refuse="poison")
    steps = IngestSteps(store, embeddings)
    docs = [_pending("bad.md", ["poison"]), _pending("good.md", ["fine"])]
    request = IngestRequest(embed=EmbedSettings(batch_size=4, concurrency=1))
    state = {"request": request, "run": "r", "files": [], "position": 0, "pending": docs}
    update = steps.embed_and_store(state)
    assert embeddings.requests == [["poison", "fine"], ["poison"], ["fine"]]
    assert [f["source"] for f in update["failed"]] == ["bad.md"]
    assert update["stored"] == [{"source": "good.md", "status": "new", "chunks": 1}]
    assert ("delete_stale", "bad.md", "h") not in store.calls


def test_the_routes_follow_the_files_the_pending_documents_and_prune():
    steps = IngestSteps(store=None, embeddings=None)
    files, asked, pruning = ["f1", "f2"], IngestRequest(), IngestRequest(prune=True)
    assert steps.after_store({"request": asked, "files": files, "position": 1}) == "load_batch"
    assert steps.after_store({"request": asked, "files": files, "position": 2}) == "record"
    assert steps.after_store({"request": pruning, "files": files, "position": 2}) == "prune"
    assert steps.after_load({"files": files, "position": 2, "pending": [{}]}) == "embed_and_store"
    steps.resources("r").queue = object()  # requests still in flight for run r
    state = {"request": asked, "run": "r", "files": files, "position": 2, "pending": []}
    assert steps.after_load(state) == "embed_and_store"


def test_a_failing_step_stops_the_runs_requests_in_flight():
    steps = IngestSteps(store=None, embeddings=None)

    class Queue:
        closed = False

        def close(self) -> None:
            self.closed = True

    queue = steps.resources("r").queue = Queue()

    def broken(state):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        steps.closing_on_error(broken)({"run": "r"})
    assert queue.closed and steps.runs == {}
