import hashlib
import uuid

import pytest
from conftest import stored_sparse_vectors
from fake_ollama import embed_text
from qdrant_client import QdrantClient
from test_sparse import edge_bm25

from archivist.tools import sparse
from archivist.tools.errors import ArchivistError, StoreMismatch, StoreNotFound
from archivist.tools.prefixes import reads
from archivist.tools.search import SearchRequest
from archivist.tools.store import (
    SPARSE_SCHEME,
    Chunk,
    ChunkWrite,
    KnowledgeStore,
    connect,
    sparse_hint,
)

FINGERPRINT = {"embed_model": "hash", "dimension": 64, "document_prefix": "", "query_prefix": ""}


def vec(text: str) -> list[float]:
    return embed_text(text, 64)


@pytest.fixture(params=["edge", "local"])
def client(request, tmp_path) -> QdrantClient:
    """Each store test runs on both engines: Qdrant Edge and qdrant-client's local mode."""
    client = connect(tmp_path / "edge") if request.param == "edge" else QdrantClient(":memory:")
    yield client
    client.close()


def add(store: KnowledgeStore, source: str, texts: list[str], doc_hash: str = "h1") -> list[Chunk]:
    chunks = [Chunk(t, source, i) for i, t in enumerate(texts)]
    store.upsert([ChunkWrite(c, vec(c.text), doc_hash, len(chunks)) for c in chunks])
    return chunks


def test_a_store_is_created_with_its_fingerprint_and_description(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT, "shop policies")
    reopened = KnowledgeStore(client, "docs")
    assert reopened.fingerprint["embed_model"] == "hash"
    assert reopened.fingerprint["dimension"] == 64
    assert reopened.description == "shop policies"
    assert client.get_collection("docs").config.params.vectors["dense"].size == 64


def test_another_embedding_model_is_refused_with_both_names(client):
    KnowledgeStore(client, "docs").ensure(FINGERPRINT)
    other = {**FINGERPRINT, "embed_model": "all-minilm", "dimension": 384}
    with pytest.raises(StoreMismatch) as refused:
        KnowledgeStore(client, "docs").ensure(other)
    assert "'hash'" in str(refused.value) and "'all-minilm'" in str(refused.value)
    assert "--reindex" in str(refused.value)


def test_a_missing_store_says_how_to_create_it(client):
    with pytest.raises(StoreNotFound, match="archivist ingest PATH --store nothing"):
        KnowledgeStore(client, "nothing").info()


@pytest.mark.parametrize("name", ["1abc", "with-dash", "with space", ""])
def test_store_names_must_make_valid_tool_names(client, name):
    with pytest.raises(ArchivistError, match="search_<store>"):
        KnowledgeStore(client, name)


def test_chunk_ids_depend_on_source_position_and_content():
    a = Chunk("text", "a.md", 0)
    assert a.id == Chunk("text", "a.md", 0).id
    assert (
        len(
            {
                a.id,
                Chunk("text", "b.md", 0).id,
                Chunk("text", "a.md", 1).id,
                Chunk("other", "a.md", 0).id,
            }
        )
        == 4
    )


def test_chunk_ids_are_the_uuid5_of_source_position_and_content():
    # Stores made before hold these ids: re-ingesting a file overwrites its chunks in place.
    namespace = uuid.UUID("5b0c6f0e-3d0a-4d8e-9b7a-6a1c2f4e8d21")
    for chunk in (Chunk("text", "a.md", 0), Chunk("退货 30 天", "zh/说明.md", 12)):
        name = f"{chunk.source}\0{chunk.chunk_index}\0{chunk.text}"
        assert chunk.id == str(uuid.uuid5(namespace, name))
    # A lone surrogate (a file name's undecodable byte) is hashed as its code point.
    odd = Chunk("text", "bad\udc80.md", 0)
    name = f"{odd.source}\0{odd.chunk_index}\0{odd.text}".encode("utf-8", "surrogatepass")
    expected = hashlib.sha1(namespace.bytes + name, usedforsecurity=False).digest()[:16]
    assert odd.id == str(uuid.UUID(bytes=expected, version=5))


def test_upserting_the_same_chunks_twice_keeps_one_copy(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    add(store, "a.md", ["alpha one", "alpha two"])
    add(store, "a.md", ["alpha one", "alpha two"])
    assert store.count() == 2


def test_sparse_vectors_made_ahead_are_stored_as_given_and_missing_ones_made(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    assert store.sparse_scheme == SPARSE_SCHEME
    texts = ["refunds are paid within 30 days", "keep the receipt"]
    chunks = [Chunk(t, "a.md", i) for i, t in enumerate(texts)]
    ahead = ([3, 5], [0.5, 0.25])
    store.upsert(
        [
            ChunkWrite(c, vec(c.text), "h", 2, 1.0, s)
            for c, s in zip(chunks, [ahead, None], strict=True)
        ]
    )
    points, _ = client.scroll("docs", limit=10, with_vectors=True)
    stored = {p.payload["text"]: p.vector["bm25"] for p in points}
    assert (stored[texts[0]].indices, stored[texts[0]].values) == ahead
    indices, values = store.sparse_encoder().document(texts[1])
    assert stored[texts[1]].indices == indices
    assert stored[texts[1]].values == pytest.approx(values, rel=1e-6)  # float32 on Edge


def test_search_modes_return_ranked_results_with_sources(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    add(store, "refund.md", ["refunds are paid within 30 days", "keep the receipt"])
    add(store, "boots.md", ["boots NW-TX-2290 need wax-free spray"])
    for mode in ("dense", "sparse", "hybrid"):
        results = store.search(vec("refunds paid"), "refunds paid", SearchRequest(k=2, mode=mode))
        assert results[0]["source"] == "refund.md", mode
        assert results[0]["rank"] == 1 and results[0]["text"].startswith("refunds")
    filtered = store.search(vec("refunds"), "refunds", SearchRequest(k=3), sources=["boots.md"])
    assert {r["source"] for r in filtered} == {"boots.md"}


def test_stale_versions_are_removed_only_for_their_source(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    add(store, "a.md", ["old a one", "old a two"], "v1")
    add(store, "b.md", ["b stays"], "v1")
    add(store, "a.md", ["new a"], "v2")
    assert store.sources()["a.md"].doc_hash == "v2"
    store.delete_stale("a.md", "v2")
    sources = store.sources()
    assert {s: (i.doc_hash, i.chunks) for s, i in sources.items()} == {
        "a.md": ("v2", 1),
        "b.md": ("v1", 1),
    }
    assert store.delete_source("b.md") == 1
    assert list(store.sources()) == ["a.md"]


def test_an_incomplete_version_is_not_reported_as_complete(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    chunks = [Chunk(f"part {i}", "big.md", i) for i in range(3)]
    # Only two of the document's three chunks arrived (an interrupted ingest).
    store.upsert([ChunkWrite(c, vec(c.text), "v1", 3) for c in chunks[:2]])
    info = store.sources()["big.md"]
    assert (info.chunks, info.expected_chunks, info.complete) == (2, 3, False)


def test_sources_are_counted_right_when_counts_alone_cannot_tell(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    # Two files with the same content share a content hash.
    add(store, "copy1.md", ["same one", "same two"], "same")
    add(store, "copy2.md", ["same one", "same two"], "same")
    # A complete version, and a newer one whose first chunk has not arrived.
    add(store, "a.md", ["a one", "a two"], "v1")
    newer = [Chunk(f"new a {i}", "a.md", i) for i in range(3)]
    store.upsert([ChunkWrite(c, vec(c.text), "v2", 3) for c in newer[1:]])
    # Only chunks after the first, of the only version.
    part = [Chunk(f"p {i}", "p.md", i) for i in range(4)]
    store.upsert([ChunkWrite(c, vec(c.text), "v1", 4) for c in part[2:]])
    add(store, "b.md", ["b"], "v1")
    found = {s: (i.doc_hash, i.chunks, i.complete) for s, i in store.sources().items()}
    assert found == {
        "a.md": ("v1", 2, True),
        "b.md": ("v1", 1, True),
        "copy1.md": ("same", 2, True),
        "copy2.md": ("same", 2, True),
        "p.md": ("v1", 2, False),
    }


def test_searches_leave_out_documents_stored_in_part(tmp_path):
    client = connect(tmp_path / "edge")
    try:
        store = KnowledgeStore(client, "docs")
        store.ensure(FINGERPRINT)
        add(store, "a.md", ["lantern wicks burn for ten hours", "lantern glass is tempered"], "v1")
        # An ingest half-way through a new document and a new version of a.md: two of three
        # chunks each, the newer a.md's chunks with new texts (new ids).
        big = [Chunk(f"tent pegs part {i}", "big.md", i) for i in range(3)]
        # One version: the same hash, count and time (the ingest's `loaded_at`) in each part.
        store.upsert([ChunkWrite(c, vec(c.text), "b1", 3, 1.0) for c in big[:2]])
        newer = [Chunk(f"lantern wicks v2 part {i}", "a.md", i) for i in range(3)]
        store.upsert([ChunkWrite(c, vec(c.text), "v2", 3, 1.0) for c in newer[:2]])

        def found(query: str) -> set[tuple[str, str]]:
            results = store.search(vec(query), query, SearchRequest(k=10))
            return {(r["source"], r["text"]) for r in results}

        assert {s for s, _ in found("tent pegs part")} == {"a.md"}  # none of big.md
        assert {t for _, t in found("lantern wicks")} == {
            "lantern wicks burn for ten hours",
            "lantern glass is tempered",
        }  # the complete v1, nothing of v2
        store.upsert([ChunkWrite(big[2], vec(big[2].text), "b1", 3, 1.0)])
        assert {t for s, t in found("tent pegs part") if s == "big.md"} == {c.text for c in big}
    finally:
        client.close()


def test_a_search_waits_for_nobody_idle_and_names_a_busy_holder(tmp_path):
    first = connect(tmp_path / "q")
    try:
        store = KnowledgeStore(first, "docs")
        store.ensure(FINGERPRINT)
        add(store, "a.md", ["lantern"])
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            # `first` is idle: it gives the store up when asked.
            assert pool.apply(_search_elsewhere, (str(tmp_path / "q"), 1.0)) == "a.md"
            with first.hold():  # now busy: one that cannot wait is told who holds it
                message = pool.apply(_search_elsewhere, (str(tmp_path / "q"), 1.0))
    finally:
        first.close()
    assert "in use by process" in message and "test" in message
    assert "QDRANT_URL" in message


def _search_elsewhere(path: str, yield_wait: float) -> str:
    """Search the store from another process that cannot wait; it still waits `yield_wait`
    seconds for an idle holder to give the store up (1 s here in place of 5: a store of one
    chunk closes in milliseconds), and as long for a busy one before it is refused."""
    from pathlib import Path

    from archivist.tools import lease

    lease.YIELD_WAIT = yield_wait
    try:
        client = connect(Path(path), wait=0)
        try:
            return KnowledgeStore(client, "docs").search(vec("lantern"), "lantern")[0]["source"]
        finally:
            client.close()
    except ArchivistError as exc:
        return str(exc)


def test_chunks_stored_by_an_older_release_without_a_version_are_still_counted(client):
    from qdrant_client import models

    from archivist.tools.store import DENSE, SPARSE

    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    old = Chunk("written by release 0.1", "old.md", 0)
    # As release 0.1 stored a chunk: no `version` field in its payload.
    client.upsert(
        "docs",
        [
            models.PointStruct(
                id=old.id,
                vector={DENSE: vec(old.text), SPARSE: models.SparseVector(indices=[], values=[])},
                payload={
                    "text": old.text,
                    "source": "old.md",
                    "chunk_index": 0,
                    "doc_hash": "h0",
                    "doc_chunks": 1,
                    "ingested_at": 1.0,
                    "metadata": {},
                },
            )
        ],
    )
    add(store, "new.md", ["one", "two"], "h1")
    found = {s: (i.doc_hash, i.chunks, i.complete) for s, i in store.sources().items()}
    assert found == {"new.md": ("h1", 2, True), "old.md": ("h0", 1, True)}


def test_one_upsert_stores_several_sources_each_with_its_own_time(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    chunks = [Chunk("alpha", "a.md", 0), Chunk("beta", "a.md", 1), Chunk("gamma", "b.md", 0)]
    versions = [("ha", 2, 1.0), ("ha", 2, 1.0), ("hb", 1, 2.0)]
    store.upsert([ChunkWrite(c, vec(c.text), *v) for c, v in zip(chunks, versions, strict=True)])
    sources = store.sources()
    assert (sources["a.md"].ingested_at, sources["a.md"].chunks) == (1.0, 2)
    assert (sources["b.md"].ingested_at, sources["b.md"].doc_hash) == (2.0, "hb")
    assert sources["a.md"].complete and sources["b.md"].complete


def test_a_new_store_keeps_qdrant_edges_bm25_vectors_and_finds_english_and_chinese(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    assert store.fingerprint["sparse"] == sparse.DEFAULT_SCHEME
    english = "Refunds are paid within a month of the return."
    chinese = "国际订单的关税由收件人承担，快递公司会在派送时收取。"
    add(store, "refund.md", [english, "Keep the receipt for the warranty."])
    add(store, "customs.md", [chinese])
    vectors = stored_sparse_vectors(store)
    expected = edge_bm25().embed_document(english)
    assert vectors[english] == (expected.indices, expected.values)
    # Chinese text gets the encoder's words and, beside them, its CJK character bigrams.
    words = edge_bm25().embed_document(chinese)
    assert set(words.indices) < set(vectors[chinese][0])
    assert vectors[chinese] == sparse.encoder(sparse.DEFAULT_SCHEME).document(chinese)
    [first, *_] = store.search(
        None, "how many days until refunds are paid", SearchRequest(mode="sparse")
    )
    assert first["text"] == english
    [first, *_] = store.search(None, "关税由谁承担", SearchRequest(mode="sparse"))
    assert first["text"] == chinese


def test_a_store_of_the_older_scheme_is_written_and_queried_in_its_own_scheme(client):
    KnowledgeStore(client, "docs").ensure({**FINGERPRINT, "sparse": sparse.LEGACY_SCHEME})
    store = KnowledgeStore(client, "docs")
    store.ensure({**FINGERPRINT, "splitter": {"chunk_size": 500}})  # as an ingest does
    assert store.fingerprint["sparse"] == sparse.LEGACY_SCHEME
    assert store.fingerprint["splitter"] == {"chunk_size": 500}
    add(store, "boots.md", ["Boots NW-TX-2290 need wax-free spray.", "Tents dry in the shade."])
    [(indices, values)] = [v for t, v in stored_sparse_vectors(store).items() if "NW" in t]
    expected = sparse.document_vector("Boots NW-TX-2290 need wax-free spray.")
    assert indices == expected[0] and values == pytest.approx(expected[1], rel=1e-6)
    # Only our tokenizer keeps the code whole: the query finds it as one term.
    assert sparse.token_id("nw-tx-2290") in indices
    [found] = store.search(None, "NW-TX-2290", SearchRequest(k=1, mode="sparse"))
    assert found["source"] == "boots.md" and found["text"].startswith("Boots")


def test_a_store_of_an_unknown_scheme_is_refused_with_the_fix_and_kept(client):
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    add(store, "a.md", ["alpha one", "alpha two"])
    info = store.info()
    future = {**info, "fingerprint": {**info["fingerprint"], "sparse": "bm25-future-v9"}}
    client.update_collection("docs", metadata={"archivist": future})
    reopened = KnowledgeStore(client, "docs")
    for attempt in (
        lambda: reopened.check(FINGERPRINT),
        lambda: reopened.ensure(FINGERPRINT),
        lambda: reopened.search(vec("alpha"), "alpha"),
        lambda: add(reopened, "b.md", ["beta"]),
    ):
        with pytest.raises(StoreMismatch) as refused:
            attempt()
        assert "'docs'" in refused.value.message and "'bm25-future-v9'" in refused.value.message
        assert refused.value.fix.startswith("Upgrade Archivist")
        assert "archivist ingest PATH --store docs --reindex" in refused.value.fix
    assert reopened.count() == 2 and reopened.info() == future


def test_a_store_of_the_previous_folded_scheme_keeps_its_vectors_and_is_searched_by_them(
    client,
):
    # Built before the Taiwan terms were folded: OpenCC's words alone.
    store = KnowledgeStore(client, "docs")
    store.ensure({**FINGERPRINT, "sparse": sparse.FOLDED_SCHEME})
    page = "全域設定的說明：在應用的最外層設定語言與主題。"
    add(store, "config.md", [page, "按鈕的載入狀態與預設值。"])
    assert store.sparse_scheme == sparse.FOLDED_SCHEME != SPARSE_SCHEME
    assert stored_sparse_vectors(store)[page] == sparse.encoder(sparse.FOLDED_SCHEME).document(page)
    assert stored_sparse_vectors(store)[page] != sparse.encoder(SPARSE_SCHEME).document(page)
    # Its queries are folded as its chunks were, so a Traditional question finds the page.
    [first, *_] = store.search(None, "全域設定", SearchRequest(mode="sparse"))
    assert first["text"] == page
    assert "older scheme" in sparse_hint("docs", store.sparse_scheme)
    # A new store gets the Taiwan terms too: the Taiwan and the mainland word meet.
    new = KnowledgeStore(client, "fresh")
    new.ensure(FINGERPRINT)
    add(new, "config.md", [page, "按鈕的載入狀態與預設值。"])
    [first, *_] = new.search(None, "全局设置", SearchRequest(mode="sparse"))
    assert first["text"] == page and sparse_hint("fresh", new.sparse_scheme) is None


ENGLISH = [
    "Refunds are paid within 14 days of order NW-TX-2290 (ISO 9001, v1.2, 3.14 kg).",
    "The tent's poles are aluminium; returns need the receipt.",
]


@pytest.mark.parametrize("scheme", sorted(sparse.SAME_WITHOUT_CJK))
def test_schemes_that_differ_only_on_cjk_text_make_the_same_vectors_without_it(scheme):
    older, default = sparse.encoder(scheme), sparse.encoder(SPARSE_SCHEME)
    for text in ENGLISH:
        assert older.document(text) == default.document(text)
        assert older.query(text) == default.query(text)


def test_the_upgrade_hint_is_given_only_where_a_reindex_would_change_the_vectors():
    older = sparse.FOLDED_TW_SCHEME
    # An English store of a scheme that differs from the default only on CJK text: no hint.
    assert sparse_hint("en", older, ENGLISH) is None
    # Its sample holds Chinese, or no sample was read: the hint.
    assert "older scheme" in sparse_hint("zh", older, [*ENGLISH, "按鈕的載入狀態"])
    assert "older scheme" in sparse_hint("zh", older)
    # The legacy scheme tokenises English differently too.
    assert "older scheme" in sparse_hint("old", sparse.LEGACY_SCHEME, ENGLISH)
    assert sparse_hint("new", SPARSE_SCHEME, [*ENGLISH, "按钮"]) is None


def test_the_stores_listing_hints_a_reindex_for_a_chinese_store_of_an_older_scheme(client):
    from archivist.stores import describe_stores

    for name, texts in (("en", ENGLISH), ("zh", ["全域設定的說明", "按鈕的載入狀態"])):
        store = KnowledgeStore(client, name)
        store.ensure({**FINGERPRINT, "sparse": sparse.FOLDED_TW_SCHEME})
        add(store, "a.md", texts)
    notices = {e["store"]: e["sparse_notice"] for e in describe_stores(client)}
    assert notices["en"] is None
    assert "Store 'zh' keeps keyword vectors of the older scheme" in notices["zh"]


def test_asking_for_another_scheme_than_the_stores_is_refused(client):
    KnowledgeStore(client, "docs").ensure({**FINGERPRINT, "sparse": sparse.LEGACY_SCHEME})
    with pytest.raises(StoreMismatch, match="--reindex"):
        KnowledgeStore(client, "docs").check({**FINGERPRINT, "sparse": sparse.EDGE_SCHEME})


def test_the_sparse_scheme_is_read_once_for_many_writes_and_again_once_another_client_rebuilt_it(
    tmp_path, monkeypatch
):
    reads = []
    plain = KnowledgeStore._encoder_of

    def counted(self, fingerprint):
        reads.append(fingerprint.get("sparse"))
        return plain(self, fingerprint)

    monkeypatch.setattr(KnowledgeStore, "_encoder_of", counted)
    first, second = connect(tmp_path / "edge"), connect(tmp_path / "edge")
    try:
        store = KnowledgeStore(first, "docs")
        store.ensure({**FINGERPRINT, "sparse": sparse.LEGACY_SCHEME})
        with first.hold():  # as an ingest holds the store through its writes
            for n in range(3):
                add(store, f"note{n}.md", [f"Boots {n} need wax.", f"Tents {n} dry slowly."])
        assert reads == [sparse.LEGACY_SCHEME]  # not again after each write of points
        # Another client (another process) rebuilds the store in the new scheme.
        rebuilt = KnowledgeStore(second, "docs")
        rebuilt.drop()
        rebuilt.ensure(FINGERPRINT)
        # The next write, outside any block, makes its vectors in the store's new scheme.
        add(store, "boots.md", ["Boots NW-TX-2290 need wax-free spray."])
        assert store.sparse_encoder().scheme == SPARSE_SCHEME == sparse.DEFAULT_SCHEME
        assert reads == [sparse.LEGACY_SCHEME, sparse.DEFAULT_SCHEME]
        [vector] = [v for t, v in stored_sparse_vectors(store).items() if "NW" in t]
        assert (
            vector[0]
            == sparse.encoder(sparse.DEFAULT_SCHEME).document(
                "Boots NW-TX-2290 need wax-free spray."
            )[0]
        )
    finally:
        first.close()
        second.close()


def test_chunks_tied_in_score_come_back_in_the_same_order_whatever_order_they_were_written(client):
    # 60 chunks that each hold the query's one term once: BM25 scores them all the same, more
    # than a ranking's depth (20), so which ones come back is decided by the tie-break alone.
    texts = {f"note{i:02d}.md": f"note number {i:02d} says code 7 applies here" for i in range(60)}
    stores = {}
    for name, order in (("docs_a", sorted(texts)), ("docs_b", sorted(texts, reverse=True))):
        store = stores[name] = KnowledgeStore(client, name)
        store.ensure(FINGERPRINT)
        for source in order:
            add(store, source, [texts[source]])
    ids = sorted(Chunk(text, source, 0).id for source, text in texts.items())
    for mode in ("sparse", "hybrid"):
        found = {
            name: [
                r["chunk_id"]
                for r in store.search(vec("code 7"), "7", SearchRequest(k=5, mode=mode))
            ]
            for name, store in stores.items()
        }
        assert found["docs_a"] == found["docs_b"], mode
    sparse_a = stores["docs_a"].search(None, "7", SearchRequest(k=5, mode="sparse"))
    assert len({round(r["score"], 6) for r in sparse_a}) == 1
    assert [r["chunk_id"] for r in sparse_a] == ids[:5]


def _unit(cosine: float) -> list[float]:
    """A 64-dimensional unit vector at `cosine` to the first axis (the query's)."""
    return [cosine, (1 - cosine**2) ** 0.5, *[0.0] * 62]


# Twenty-four passages about one place: BM25 finds them all and puts `gold`, the only one with
# the question's other words, far ahead; the dense ranking holds the same passages (full
# lists that share every candidate) but prefers `lookalike`, by a margin too small to count
# on its own.
AGREEING = {
    "zh": (
        "威尔特郡的东北与格洛斯特郡相邻",
        "威尔特郡的郡治是特罗布里奇",
        "威尔特郡",
        "威尔特郡的东北与哪个郡相邻？",
    ),
    "en": (
        "Wiltshire borders Gloucestershire to the north east",
        "Wiltshire has its county town at Trowbridge",
        "Wiltshire",
        "Which county borders Wiltshire to the north east?",
    ),
}


@pytest.mark.parametrize(
    ("model", "language", "first"),
    [
        ("all-minilm", "zh", "gold.txt"),  # an English model cannot read the question
        ("nomic-embed-text:v1.5", "zh", "gold.txt"),
        ("all-minilm", "en", "lookalike.txt"),  # it can read this one: agreement counts
        ("bge-m3", "zh", "lookalike.txt"),  # a model not known to be English-only
    ],
)
def test_agreement_with_bm25_counts_only_for_a_model_that_reads_the_questions_language(
    client, model, language, first
):
    gold, lookalike, other, question = AGREEING[language]
    passages = [("gold.txt", gold, 0.700), ("lookalike.txt", lookalike, 0.780)]
    passages += [(f"p{i:02}.txt", f"{other} {i}", 0.700 + 0.001 * i) for i in range(22)]
    store = _places(client, model, passages)
    dense = store.search(_unit(1.0), question, SearchRequest(k=3, mode="dense"))
    bm25 = store.search(None, question, SearchRequest(k=3, mode="sparse"))
    assert (dense[0]["source"], bm25[0]["source"]) == ("lookalike.txt", "gold.txt")
    hybrid = store.search(_unit(1.0), question, SearchRequest(k=3))
    assert hybrid[0]["source"] == first
    margin_alone = store.search(_unit(1.0), question, SearchRequest(k=3, fusion="margin"))
    assert margin_alone[0]["source"] == "gold.txt"


@pytest.mark.parametrize(
    ("model", "language", "first"),
    [
        ("all-minilm", "zh", "gold.txt"),  # cannot read the question: BM25's order
        ("all-minilm", "en", "lookalike.txt"),  # its cosines stand apart: dense counts
        ("bge-m3", "zh", "lookalike.txt"),
    ],
)
def test_a_model_that_cannot_read_the_question_has_no_say_however_its_cosines_stand_apart(
    client, model, language, first
):
    gold, lookalike, other, question = AGREEING[language]
    # `lookalike` stands far above the other cosines (a full margin), and dense alone found
    # `elsewhere`, which holds none of the question's words.
    passages = [("gold.txt", gold, 0.30), ("lookalike.txt", lookalike, 0.99)]
    passages += [(f"p{i:02}.txt", f"{other} {i}", 0.30 + 0.001 * i) for i in range(22)]
    passages += [("elsewhere.txt", "Trowbridge 特罗布里奇", 0.90)]
    store = _places(client, model, passages)
    bm25 = store.search(None, question, SearchRequest(k=5, mode="sparse"))
    hybrid = store.search(_unit(1.0), question, SearchRequest(k=5))
    assert hybrid[0]["source"] == first
    if first == "gold.txt":  # hybrid ranks as BM25 does; what dense alone found comes after
        assert [r["source"] for r in hybrid] == [r["source"] for r in bm25]
        assert "elsewhere.txt" not in [r["source"] for r in hybrid]
    # Fused as earlier releases did, the margin counts whatever the language.
    margin_alone = store.search(_unit(1.0), question, SearchRequest(k=3, fusion="margin"))
    assert margin_alone[0]["source"] == "lookalike.txt"


def _places(client, model: str, passages: list[tuple[str, str, float]]) -> KnowledgeStore:
    """Store `places`, embedded by `model`, holding each (source, text, cosine to the query
    vector `_unit(1.0)`) as a one-chunk source."""
    store = KnowledgeStore(client, "places")
    # BM25 over words alone: the passages were written for it (with CJK bigrams, the gold
    # passage, which repeats most of the question, stands further ahead than any dense lead).
    store.ensure({**FINGERPRINT, "embed_model": model, "sparse": sparse.FOLDED_TW_SCHEME})
    store.upsert(
        [ChunkWrite(Chunk(text, source, 0), _unit(c), "h", 1) for source, text, c in passages]
    )
    return store


def _ranked(scores: list[tuple[str, str, float]]) -> list:
    from qdrant_client import models

    return [
        models.ScoredPoint(id=pid, version=0, score=score, payload={"source": source})
        for pid, source, score in scores
    ]


def test_the_fusion_scores_a_page_by_its_best_chunk_in_each_ranking():
    from archivist.tools.ranking import fuse_zscore

    # Dense finds the modal page by its introduction, BM25 by its API table; the popconfirm
    # page is second in both, by one chunk. Chunk by chunk, that one chunk would win.
    fillers = [(f"f{i}", f"f{i}.md", 0.0) for i in range(19)]
    dense = _ranked(
        [("intro", "modal.md", 0.90), ("pc", "popconfirm.md", 0.80)]
        + [(pid, src, 0.50 - 0.001 * i) for i, (pid, src, _) in enumerate(fillers)]
    )
    bm25 = _ranked(
        [("table", "modal.md", 10.0), ("pc", "popconfirm.md", 9.0)]
        + [(pid, src, 3.0 - 0.01 * i) for i, (pid, src, _) in enumerate(fillers)]
    )
    fused = fuse_zscore(dense, bm25, agreement=False)
    order = [p.id for p, _ in fused]
    scores = {p.id: score for p, score in fused}
    # The modal page's better chunk stands for it, with the page's best of both rankings.
    assert order[0] in ("intro", "table") and order[1] == "pc"
    other = "table" if order[0] == "intro" else "intro"
    assert scores[order[0]] > scores["pc"] > scores[other]
    # Its other chunks, and other pages', keep their own sums: chunk order within a page.
    assert order.index("f0") < order.index("f18")
    # Chunk by chunk (one chunk a page), the order is the plain weighted sum's.
    single = fuse_zscore(dense[1:], bm25[1:], agreement=False)
    assert [p.id for p, _ in single][:2] == ["pc", "f0"]
    # Points without a source are pages of their own.
    for point in [*dense, *bm25]:
        point.payload = {}
    assert [p.id for p, _ in fuse_zscore(dense, bm25, agreement=False)][0] == "pc"


@pytest.mark.parametrize(
    ("model", "text", "read"),
    [
        ("all-minilm", "How do I read settings with Pydantic?", True),
        ("all-minilm", "如何通过环境变量和 Pydantic 读取应用配置？", False),  # one English word
        ("library/nomic-embed-text:v1.5", "Как настроить CORS?", False),
        ("nomic-embed-text", "Réglages à l'œil, façon café", True),  # Latin letters all
        ("nomic-embed-text", "2024-05 → 42", True),  # nothing to read: no reason to doubt
        ("bge-m3", "如何读取应用配置？", True),
        (None, "如何读取应用配置？", True),
    ],
)
def test_a_model_trained_on_english_alone_does_not_read_other_scripts(model, text, read):
    assert reads(model, text) is read
