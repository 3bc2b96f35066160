"""Congruence: the same store behaviour on the embedded store and on a Qdrant server.

Every test runs on the embedded store, and again on the server at QDRANT_URL when it is set
(with QDRANT_API_KEY, and ARCHIVIST_QDRANT_GRPC=1 for gRPC). The server leg works in
collections with unique names and drops them afterwards, so it can point at a shared server:

    QDRANT_URL=http://localhost:6333 ./run test tests/test_congruence.py
"""

import inspect
import math
import os
import shutil
import uuid
from collections.abc import Iterator

import pytest
from conftest import SHOP, stored_sparse_vectors, write_files
from fake_ollama import embed_text
from qdrant_client import QdrantClient

from archivist.ingest.graph import DIMENSION_PROBE, build_ingest_graph, run_ingest
from archivist.ingest.request import IngestRequest
from archivist.tools import engine as engines
from archivist.tools import sparse
from archivist.tools.edge import EdgeClient
from archivist.tools.errors import StoreMismatch
from archivist.tools.migrate import copy_store
from archivist.tools.search import SearchRequest
from archivist.tools.store import (
    PAYLOAD_INDEXES,
    Chunk,
    ChunkWrite,
    KnowledgeStore,
    ServerLayout,
    connect,
    list_stores,
)

# Read when the module is imported: the autouse `home` fixture unsets QDRANT_URL in each test.
SERVER_URL = os.environ.get("QDRANT_URL")
SERVER_KEY = os.environ.get("QDRANT_API_KEY")
SERVER_GRPC = os.environ.get("ARCHIVIST_QDRANT_GRPC", "") not in ("", "0", "false", "no")
SKIP_SERVER = (
    "Qdrant server leg skipped: QDRANT_URL is not set. Start a server (docker run -p 6333:6333 "
    "-p 6334:6334 qdrant/qdrant, or deploy/compose.yaml) and run with QDRANT_URL=http://host:6333."
)
FINGERPRINT = {"embed_model": "hash", "dimension": 64, "document_prefix": "", "query_prefix": ""}
# On a server, new collections are split in two shards, so a search has to merge across them.
SERVER_LAYOUT = ServerLayout(shard_number=2, replication_factor=1, write_consistency_factor=1)


def vec(text: str) -> list[float]:
    return embed_text(text, 64)


class Engine:
    """One Qdrant (embedded or server) and the stores a test made in it."""

    def __init__(self, kind: str, client, layout: ServerLayout | None) -> None:
        self.kind = kind
        self.client = client
        self.layout = layout
        self.prefix = f"t{uuid.uuid4().hex[:10]}_"
        self.names: list[str] = []

    @property
    def server(self) -> bool:
        return self.kind == "server"

    def store(self, base: str = "docs") -> KnowledgeStore:
        store = KnowledgeStore(self.client, self.prefix + base, self.layout)
        self.names += [store.name, store.rebuild_store().name]
        return store

    def drop_all(self) -> None:
        for name in self.names:
            if self.client.collection_exists(name):
                self.client.delete_collection(name)


@pytest.fixture(params=["embedded", "server"])
def engine(request, tmp_path) -> Iterator[Engine]:
    if request.param == "server":
        if not SERVER_URL:
            pytest.skip(SKIP_SERVER)
        client = connect(url=SERVER_URL, api_key=SERVER_KEY, prefer_grpc=SERVER_GRPC, timeout=60)
        engine = Engine("server", client, SERVER_LAYOUT)
    else:
        engine = Engine("embedded", connect(tmp_path / "engine"), None)
    try:
        yield engine
    finally:
        engine.drop_all()
        engine.client.close()


def _takes_protocol_arguments(client, protocol) -> bool:
    """Whether each method the protocol lists takes, on `client`, the arguments it names."""
    for name, declared in vars(protocol).items():
        if name.startswith("_") or not inspect.isfunction(declared):
            continue
        wanted = set(inspect.signature(declared).parameters) - {"self"}
        if not wanted <= set(inspect.signature(getattr(client, name)).parameters):
            return False
    return True


def test_each_engine_declares_the_protocol_it_meets(tmp_path):
    embedded = EdgeClient(tmp_path / "engine")
    server_shaped = QdrantClient(location=":memory:")
    try:
        assert isinstance(embedded, engines.TurnTakingEngine)
        assert engines.turn_taking(embedded) is embedded
        assert isinstance(server_shaped, engines.Engine)
        assert engines.turn_taking(server_shaped) is None
        for client in (embedded, server_shaped):
            assert _takes_protocol_arguments(client, engines.Engine)
        assert _takes_protocol_arguments(embedded, engines.TurnTakingEngine)
        with engines.held(server_shaped), engines.writing(server_shaped):
            pass  # a server's blocks are plain blocks
        with engines.held(embedded), engines.writing(embedded):
            assert embedded.generation is not None
    finally:
        embedded.close()
        server_shaped.close()


def add(store: KnowledgeStore, source: str, texts: list[str], doc_hash: str = "h1", total=None):
    chunks = [Chunk(t, source, i) for i, t in enumerate(texts)]
    total = len(chunks) if total is None else total
    store.upsert([ChunkWrite(c, vec(c.text), doc_hash, total) for c in chunks])
    return chunks


CORPUS = {
    "refund.md": [
        "Refunds are paid within 30 days of delivery to the original payment method.",
        "Store credit gives a 10% bonus and never expires.",
    ],
    "warranty.md": [
        "All products carry a 2-year warranty; Summit tents have five years.",
        "Warranty codes look like WX-7731 and are printed on the receipt.",
    ],
    "shipping.md": [
        "Standard shipping takes 3 to 5 business days and costs 4.95 euros.",
        "Express delivery takes one to two days with UPS.",
        "International parcels take 7 to 14 business days.",
    ],
}


def filled(engine: Engine) -> KnowledgeStore:
    store = engine.store()
    store.ensure(FINGERPRINT, "shop policies")
    for source, texts in CORPUS.items():
        add(store, source, texts)
    return store


def cosines(query: str) -> dict[str, float]:
    """Each chunk's cosine similarity to the query, by id, computed here by brute force."""
    q = vec(query)
    found = {}
    for source, texts in CORPUS.items():
        for i, text in enumerate(texts):
            v = vec(text)
            cos = sum(a * b for a, b in zip(q, v, strict=True)) / math.sqrt(sum(a * a for a in v))
            found[Chunk(text, source, i).id] = cos
    return found


def test_a_store_is_created_with_its_fingerprint_description_and_indexes(engine):
    store = engine.store()
    store.ensure(FINGERPRINT, "shop policies")
    reopened = KnowledgeStore(engine.client, store.name)
    assert reopened.fingerprint["embed_model"] == "hash"
    assert (
        reopened.fingerprint["sparse"]
        == "bm25-qdrant-multilingual-en-numbers-zhfold-v2-cjkbigrams-v1"
    )
    assert reopened.description == "shop policies"
    collection = engine.client.get_collection(store.name)
    assert collection.config.params.vectors["dense"].size == 64
    if engine.server:
        assert set(PAYLOAD_INDEXES) <= set(collection.payload_schema)
        assert collection.config.params.shard_number == SERVER_LAYOUT.shard_number
        assert collection.config.params.replication_factor == SERVER_LAYOUT.replication_factor


def test_ensuring_an_existing_store_again_keeps_it(engine):
    store = filled(engine)
    KnowledgeStore(engine.client, store.name, engine.layout).ensure(FINGERPRINT)
    assert store.count() == 7 and store.description == "shop policies"


def test_dense_search_ranks_as_brute_force_cosine_does(engine):
    store = filled(engine)
    for query in ("how long does shipping take", "warranty on tents", "refund to my card"):
        results = store.search(vec(query), query, SearchRequest(k=4, mode="dense", diversify=False))
        brute = cosines(query)
        assert [r["rank"] for r in results] == [1, 2, 3, 4]
        # Within float16 storage's precision (the embedded store's; a server keeps float32).
        expected = [brute[r["chunk_id"]] for r in results]
        assert [r["score"] for r in results] == pytest.approx(expected, abs=1e-3)
        assert all(a["score"] >= b["score"] for a, b in zip(results, results[1:], strict=False))
        left_out = [c for i, c in brute.items() if i not in {r["chunk_id"] for r in results}]
        assert results[-1]["score"] >= max(left_out) - 1e-6, query


def test_sparse_search_finds_a_code_and_only_passages_sharing_words(engine):
    store = filled(engine)
    results = store.search(None, "WX-7731", SearchRequest(k=5, mode="sparse", diversify=False))
    assert [r["text"] for r in results] == [CORPUS["warranty.md"][1]]
    results = store.search(
        None, "business days", SearchRequest(k=7, mode="sparse", diversify=False)
    )
    encoder = sparse.encoder(sparse.DEFAULT_SCHEME)
    words = set(encoder.query("business days")[0])
    sharing = {t for texts in CORPUS.values() for t in texts if words & set(encoder.document(t)[0])}
    assert {r["text"] for r in results} == sharing and len(sharing) == 4
    # "business" is rarer than "days": Qdrant's IDF puts the two passages with both first.
    assert {r["text"] for r in results[:2]} == {CORPUS["shipping.md"][0], CORPUS["shipping.md"][2]}


@pytest.mark.parametrize("scheme", sparse.SCHEMES)
def test_each_scheme_stores_the_vectors_its_encoder_makes_and_searches_with_them(engine, scheme):
    # Computed on our side for both engines: a server stores what the embedded store does.
    store = engine.store()
    store.ensure({**FINGERPRINT, "sparse": scheme})
    for source, texts in CORPUS.items():
        add(store, source, texts)
    encoder = sparse.encoder(scheme)
    stored = stored_sparse_vectors(store)
    assert stored.keys() == {t for texts in CORPUS.values() for t in texts}
    for text, (indices, values) in stored.items():
        expected = encoder.document(text)
        assert indices == expected[0] and values == pytest.approx(expected[1], rel=1e-6)
    [first, *_] = store.search(None, "Summit tent warranty years", SearchRequest(mode="sparse"))
    assert first["text"] == CORPUS["warranty.md"][0]


def test_hybrid_search_puts_first_what_both_rankings_agree_on(engine):
    store = filled(engine)
    query = "Refunds paid to the original payment method"
    results = store.search(vec(query), query, SearchRequest(k=4, mode="hybrid", diversify=False))
    assert results[0]["text"] == CORPUS["refund.md"][0]
    assert len(results) == 4 and len({r["chunk_id"] for r in results}) == 4
    assert results[0]["metadata"] == {} and results[0]["source"] == "refund.md"


@pytest.mark.parametrize("mode", ["dense", "sparse", "hybrid"])
def test_filters_keep_results_to_the_given_sources(engine, mode):
    store = filled(engine)
    query = "days"
    request = SearchRequest(k=5, mode=mode)
    results = store.search(vec(query), query, request, sources=["shipping.md", "refund.md"])
    assert results and {r["source"] for r in results} <= {"shipping.md", "refund.md"}
    only = store.search(vec(query), query, SearchRequest(k=5, mode=mode), sources=["warranty.md"])
    assert {r["source"] for r in only} <= {"warranty.md"}


def test_a_new_version_replaces_the_old_one_for_its_source_only(engine):
    store = filled(engine)
    add(store, "refund.md", ["Refunds are paid within 14 days."], "h2")
    assert store.sources()["refund.md"].doc_hash == "h2"
    store.delete_stale("refund.md", "h2")
    held = {s: (i.doc_hash, i.chunks, i.complete) for s, i in store.sources().items()}
    assert held == {
        "refund.md": ("h2", 1, True),
        "shipping.md": ("h1", 3, True),
        "warranty.md": ("h1", 2, True),
    }
    assert store.delete_source("shipping.md") == 3
    assert list(store.sources()) == ["refund.md", "warranty.md"]
    assert store.count() == 3


def test_an_incomplete_version_is_reported_as_such(engine):
    store = filled(engine)
    add(store, "big.md", ["part one", "part two"], "v1", total=3)
    info = store.sources()["big.md"]
    assert (info.chunks, info.expected_chunks, info.complete) == (2, 3, False)


def test_another_embedding_model_is_refused(engine):
    store = filled(engine)
    other = {**FINGERPRINT, "embed_model": "all-minilm", "dimension": 384}
    with pytest.raises(StoreMismatch, match="'hash'.*'all-minilm'"):
        KnowledgeStore(engine.client, store.name).ensure(other)
    assert store.count() == 7


def test_a_rebuild_is_swapped_in_without_embedding_again(engine):
    store = filled(engine)
    rebuild = store.rebuild_store()
    rebuild.ensure({**FINGERPRINT, "embed_model": "hash2"}, "rebuilt")
    add(rebuild, "new.md", ["a rebuilt passage"])
    store.replace_with(rebuild)
    assert not rebuild.exists()
    assert store.fingerprint["embed_model"] == "hash2"
    assert list(store.sources()) == ["new.md"]
    hit = store.search(vec("a rebuilt passage"), "rebuilt passage", SearchRequest(k=1))
    assert hit[0]["text"] == "a rebuilt passage"


class Crash(Exception):
    """Stands for the process dying at the exact step."""


class CrashingClient:
    """A client that dies instead of making its `fatal`-th write (never, if 0)."""

    WRITES = {
        "create_collection",
        "create_payload_index",
        "delete_collection",
        "update_collection",
        "upsert",
    }

    def __init__(self, client, fatal: int) -> None:
        self.client, self.fatal, self.writes = client, fatal, 0

    def __getattr__(self, name: str):
        attr = getattr(self.client, name)
        if name not in self.WRITES:
            return attr

        def write(*args, **kwargs):
            self.writes += 1
            if self.writes == self.fatal:
                raise Crash(name)
            return attr(*args, **kwargs)

        return write


def test_a_swap_cut_short_at_any_step_is_finished_from_the_complete_rebuild(engine):
    crashed_at = []
    for fatal in range(1, 100):
        store = filled(engine)
        rebuild = store.rebuild_store()
        rebuild.ensure({**FINGERPRINT, "embed_model": "hash2"}, "rebuilt")
        for i in range(5):
            add(rebuild, f"new{i}.md", [f"rebuilt passage {i}", f"second passage {i}"])
        dying = KnowledgeStore(CrashingClient(engine.client, fatal), store.name)
        try:
            dying.replace_with(dying.rebuild_store(), batch=3)
        except Crash:
            crashed_at.append(fatal)
        else:
            break
        finally:
            assert (store.name in list_stores(engine.client)) == store.exists()
            assert rebuild.name not in list_stores(engine.client)
        if fatal == 1:
            # Cut before the rebuild was marked complete: the store is untouched, and the
            # next --reindex run resumes the rebuild (test_ingest_recovery.py).
            assert not store.finish_swap()
            assert store.fingerprint["embed_model"] == "hash" and store.count() == 7
            rebuild.drop()
            store.drop()
            continue
        # The next command to open the store finishes the swap: the whole rebuild, once.
        assert store.finish_swap()
        assert not rebuild.exists()
        assert store.fingerprint["embed_model"] == "hash2"
        assert store.count() == 10
        assert sorted(store.sources()) == [f"new{i}.md" for i in range(5)]
        assert not store.finish_swap()
        store.drop()
    # Mark, drop, create, an index per indexed field, 4 copy batches, drop: every step was
    # cut once.
    steps = 3 + len(PAYLOAD_INDEXES) + 4 + 1
    assert crashed_at == list(range(1, steps + 1))


def test_a_store_copied_from_an_embedded_home_answers_the_same_searches(engine, tmp_path):
    origin_client = connect(tmp_path / "origin")
    try:
        origin = KnowledgeStore(origin_client, engine.prefix + "docs")
        origin.ensure(FINGERPRINT, "shop policies")
        for source, texts in CORPUS.items():
            add(origin, source, texts)
        target = engine.store()
        assert copy_store(origin, target, batch=3) == 7
        assert target.info() == origin.info()
        for query in ("refund days", "WX-7731 warranty", "express delivery"):
            for mode in ("dense", "sparse"):
                # Every chunk with its score (the fake's embeddings make many ties to order).
                want = origin.search(vec(query), query, SearchRequest(k=7, mode=mode))
                got = target.search(vec(query), query, SearchRequest(k=7, mode=mode))
                assert {r["chunk_id"]: round(r["score"], 5) for r in got} == {
                    r["chunk_id"]: round(r["score"], 5) for r in want
                }, (mode, query)
        hit = target.search(vec("WX-7731 warranty"), "WX-7731 warranty", SearchRequest(k=1))
        assert hit[0]["text"] == CORPUS["warranty.md"][1]
    finally:
        origin_client.close()


def test_incremental_ingest_through_the_ingest_graph(engine, archivist, ollama, tmp_path):
    root = tmp_path / "kb"
    shutil.copytree(SHOP, root)
    store = engine.store()

    def ingest(prune=False):
        ollama.clear_requests()
        graph = build_ingest_graph(store, archivist.embeddings, batch_files=4)
        report = run_ingest(graph, IngestRequest((str(root),), prune=prune))
        texts = [t for b in ollama.requests_to("/api/embed") for t in b["input"]]
        return report, [t for t in texts if not t.endswith(DIMENSION_PROBE)]

    first, texts = ingest()
    assert len(first.stored) == 10 and store.count() == len(texts)
    again, texts = ingest()
    assert again.stored == [] and len(again.unchanged) == 10 and texts == []

    write_files(root, {"refund.md": "# Refunds\n\nRefunds are now paid within 14 days."})
    (root / "privacy.md").unlink()
    changed, texts = ingest(prune=True)
    assert changed.stored == [{"source": "refund.md", "status": "updated", "chunks": 1}]
    assert changed.removed == ["privacy.md"]
    assert texts == ["search_document: # Refunds\n\nRefunds are now paid within 14 days."]
    held = store.sources()
    assert "privacy.md" not in held and held["refund.md"].chunks == 1
    query = "refunds paid"
    found = store.search(archivist.embeddings.embed_query(query), query, sources=["refund.md"])
    assert [r["text"] for r in found] == ["# Refunds\n\nRefunds are now paid within 14 days."]
