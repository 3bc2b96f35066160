"""Qdrant Edge behind EdgeClient: congruence with qdrant-client's local mode, persistence,
turns at the store, and moving stores made by release 0.1 (qdrant-client local mode) over."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from conftest import ROOT, SHOP
from edge_samples import DOCS, dense_store, fill, grow, random_vectors, small_segments
from fake_ollama import embed_text
from qdrant_client import QdrantClient, models

from archivist.app import Archivist
from archivist.tools import points
from archivist.tools.edge import EdgeClient
from archivist.tools.edge.files import (
    CHECKSUM_FILE,
    COLLECTION_FILE,
    MIGRATING_FILE,
    WHOLE_CHECK_BYTES,
    facet_key,
    read_seal,
)
from archivist.tools.errors import StoreDamaged, StoreLocked
from archivist.tools.migrate import migrate_legacy, migrate_local
from archivist.tools.search import SearchRequest
from archivist.tools.sparse import query_vector
from archivist.tools.store import DENSE, SPARSE, Chunk, ChunkWrite, KnowledgeStore

# qdrant-client's local mode warns that it ignores the payload index the stores create.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
FINGERPRINT = {"embed_model": "hash", "dimension": 64, "document_prefix": "", "query_prefix": ""}


def _fill(client) -> list[str]:
    return fill(client, models)


@pytest.fixture
def pair(tmp_path):
    """The same collection in Qdrant Edge and in qdrant-client's local mode."""
    edge, local = EdgeClient(tmp_path / "edge"), QdrantClient(":memory:")
    ids = _fill(edge)
    assert _fill(local) == ids
    yield edge, local, ids
    edge.close()
    local.close()


def _sparse(text: str) -> models.SparseVector:
    indices, values = query_vector(text)
    return models.SparseVector(indices=indices, values=values)


def _query(client, query, using: str, limit: int, query_filter=None):
    """One query as the stores send it: in a batch, with the payload."""
    request = models.QueryRequest(
        query=query, using=using, filter=query_filter, limit=limit, with_payload=True
    )
    return client.query_batch_points("docs", requests=[request])[0]


def _ranked(response) -> list[tuple[str, float]]:
    # Edge stores float16 vectors: its scores are within ~1e-3 of local mode's float32 ones.
    return [(str(p.id), round(p.score, 3)) for p in response.points]


FILTERS = {
    "must": models.Filter(
        must=[models.FieldCondition(key="source", match=models.MatchValue(value="boots.md"))]
    ),
    "any": models.Filter(
        must=[
            models.FieldCondition(key="source", match=models.MatchAny(any=["refund.md", "退货.md"]))
        ]
    ),
    "must_and_must_not": models.Filter(
        must=[models.FieldCondition(key="source", match=models.MatchValue(value="refund.md"))],
        must_not=[models.FieldCondition(key="n", match=models.MatchValue(value=2))],
    ),
}


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filters_select_the_same_points_on_both_engines(pair, name):
    edge, local, _ = pair
    wanted = FILTERS[name]
    assert edge.count("docs", count_filter=wanted).count == (
        local.count("docs", count_filter=wanted).count
    )
    query = embed_text("refund boots", 64)
    found = [
        # Engines order equal scores differently; either order is a right answer.
        sorted(
            _ranked(_query(c, query, DENSE, 6, wanted)),
            key=lambda hit: (-hit[1], hit[0]),
        )
        for c in (edge, local)
    ]
    assert found[0] == found[1]


def test_deleting_by_filter_removes_the_same_points_on_both_engines(pair):
    edge, local, _ = pair
    stale = FILTERS["must_and_must_not"]
    for client in (edge, local):
        client.delete("docs", points_selector=stale, wait=True)
        assert client.count("docs").count == len(DOCS) - 1
        assert client.count("docs", count_filter=stale).count == 0


@pytest.mark.parametrize(
    "unused",
    [
        models.Filter(should=[models.FieldCondition(key="n", match=models.MatchValue(value=6))]),
        models.Filter(must=[models.FieldCondition(key="n", range=models.Range(lt=3))]),
    ],
    ids=["should", "range"],
)
def test_filters_no_store_makes_are_refused_not_mistranslated(pair, unused):
    edge, _, _ = pair
    with pytest.raises(NotImplementedError, match="EdgeClient"):
        edge.count("docs", count_filter=unused)


def test_sparse_scores_apply_idf_like_local_mode(pair):
    edge, local, _ = pair
    edge_ranks = _ranked(_query(edge, _sparse("boots refund"), SPARSE, 6))
    local_ranks = _ranked(_query(local, _sparse("boots refund"), SPARSE, 6))
    assert [i for i, _ in edge_ranks] == [i for i, _ in local_ranks]
    assert [s for _, s in edge_ranks] == pytest.approx([s for _, s in local_ranks], rel=1e-3)


def test_scroll_pages_through_every_point_with_selected_fields(pair):
    edge, _, ids = pair
    seen, offset = [], None
    while True:
        records, offset = edge.scroll("docs", limit=4, offset=offset, with_payload=["source"])
        seen += records
        if offset is None:
            break
    assert sorted(str(r.id) for r in seen) == sorted(ids)
    assert all(set(r.payload) == {"source"} and r.vector is None for r in seen)
    # Ids as qdrant-client gives them (a UUID as its string), however late they are read.
    local = {r.id: r.payload for r in pair[1].scroll("docs", limit=100, with_payload=["source"])[0]}
    assert {r.id: r.payload for r in seen} == local
    copied = seen[0].model_copy(update={"payload": {"source": "moved.md"}})
    assert (copied.id, copied.payload) == (seen[0].id, {"source": "moved.md"})
    assert seen[0].model_dump()["id"] == seen[0].id
    [record], _ = edge.scroll("docs", limit=1, with_payload=False, with_vectors=True)
    assert len(record.vector[DENSE]) == 64
    # The embedded engine answers with its own light records (the fields of qdrant-client's).
    assert isinstance(record.vector[SPARSE], points.SparseVector)
    assert len(record.vector[SPARSE].indices) == len(record.vector[SPARSE].values) > 0


def test_collection_info_and_metadata_updates(pair):
    edge, local, _ = pair
    for client in (edge, local):
        client.update_collection("docs", metadata={"other": 1})
        info = client.get_collection("docs")
        assert info.config.metadata == {"archivist": {"description": "d"}, "other": 1}
        assert info.config.params.vectors[DENSE].size == 64
        assert info.config.params.sparse_vectors[SPARSE].modifier == models.Modifier.IDF
        assert info.points_count == len(DOCS)
    assert [c.name for c in edge.get_collections().collections] == ["docs"]


def test_a_chunks_metadata_is_kept_as_json_text_in_the_shard_and_given_back_as_it_was(
    tmp_path,
):
    import qdrant_edge as qe

    from archivist.tools.edge.convert import vectors_to_edge

    metadata = {"headings": ["Guide", "退货"], "lines": [3, 9], "page": None, "start": 0}
    client = EdgeClient(tmp_path / "edge")
    try:
        store = KnowledgeStore(client, "docs")
        store.ensure(FINGERPRINT)
        chunk = Chunk("Refunds take 30 days.", "guide.md", 0, metadata)
        store.upsert([ChunkWrite(chunk, embed_text(chunk.index_text, 64), "h1", 1)])
        shard = client._shards["docs"]
        # A chunk as stores written before hold it: its metadata a nested object in the shard.
        vectors = {DENSE: embed_text("old", 64), SPARSE: _sparse("old")}
        old = {"text": "old", "source": "old.md", "chunk_index": 0, "metadata": {"lines": [1, 2]}}
        shard.update(qe.UpdateOperation.upsert_points([qe.Point(7, vectors_to_edge(vectors), old)]))
        raw, _ = shard.scroll(qe.ScrollRequest(limit=10, with_payload=True, with_vector=False))
        in_shard = {r.payload["source"]: r.payload["metadata"] for r in raw}
        assert isinstance(in_shard["guide.md"], str)
        assert json.loads(in_shard["guide.md"]) == metadata
        assert in_shard["old.md"] == {"lines": [1, 2]}

        records, _ = client.scroll("docs", limit=10, with_payload=True)
        given = {r.payload["source"]: r.payload["metadata"] for r in records}
        assert given == {"guide.md": metadata, "old.md": {"lines": [1, 2]}}
        [hit] = store.search(embed_text(chunk.index_text, 64), "refunds", SearchRequest(k=1))
        assert hit["source"] == "guide.md" and hit["metadata"] == metadata
    finally:
        client.close()


def test_everything_survives_closing_and_reopening(tmp_path):
    first = EdgeClient(tmp_path / "edge")
    ids = _fill(first)
    first.close()
    again = EdgeClient(tmp_path / "edge")
    try:
        assert again.count("docs").count == len(DOCS)
        assert again.get_collection("docs").config.metadata["archivist"]["description"] == "d"
        hit = _query(again, embed_text(DOCS[2][1], 64), DENSE, 1)
        assert str(hit.points[0].id) == ids[2]
        assert hit.points[0].payload["source"] == "boots.md"
    finally:
        again.close()
    # Nothing but the checksums, the collection file and the shard: files replaced atomically.
    assert sorted(p.name for p in (tmp_path / "edge" / "docs").iterdir()) == [
        CHECKSUM_FILE,
        COLLECTION_FILE,
        "shard",
    ]


def test_a_dropped_store_is_gone_and_can_be_made_again(tmp_path):
    client = EdgeClient(tmp_path / "edge")
    try:
        _fill(client)
        assert client.delete_collection("docs")
        assert not client.collection_exists("docs") and not (tmp_path / "edge" / "docs").exists()
        _fill(client)
        assert client.count("docs").count == len(DOCS)
    finally:
        client.close()


def test_two_clients_of_one_store_take_turns(tmp_path):
    first, second = EdgeClient(tmp_path / "edge"), EdgeClient(tmp_path / "edge")
    try:
        _fill(first)
        # The second asks for the store; the first, between operations, closes its shards,
        # sealed with their counts: the second's count is answered without opening the shard.
        assert second.count("docs").count == len(DOCS)
        assert not first._shards and not second._shards
        tents = models.Filter(must=[_source("tents.md")])
        assert second.count("docs", count_filter=tents).count == 1  # this one needs the shard
        assert second._shards
        first.delete("docs", points_selector=tents)
        assert second.count("docs").count == len(DOCS) - 1
    finally:
        first.close()
        second.close()
    reopened = EdgeClient(tmp_path / "edge")
    try:
        assert reopened.count("docs").count == len(DOCS) - 1
    finally:
        reopened.close()


def _sealed(tmp_path, *asked: str):
    """A store of DOCS written and closed, after the facets of the fields `asked` were asked
    of it (their answers kept with its seal): those answers and the store's folder."""
    writer = EdgeClient(tmp_path / "edge")
    try:
        _fill(writer)
        counted = [writer.facet("docs", key=key, limit=100, exact=True) for key in asked]
    finally:
        writer.close()
    return counted, tmp_path / "edge" / "docs"


def test_listings_are_answered_from_the_seal_until_the_shard_is_written(tmp_path):
    (counted,), folder = _sealed(tmp_path, "source")
    assert read_seal(folder).counts[0] == len(DOCS)
    reader = EdgeClient(tmp_path / "edge")
    try:
        # Counts and the facet asked before come from the seal: the shard is not mapped.
        assert reader.count("docs").count == len(DOCS)
        assert reader.get_collection("docs").points_count == len(DOCS)
        assert reader.facet("docs", key="source", limit=100, exact=True) == counted
        assert not reader._shards
        # A facet never asked is counted on the shard, and kept with the seal at close.
        reader.facet("docs", key="source", limit=1, exact=True)
        assert reader._shards
    finally:
        reader.close()
    assert len(read_seal(tmp_path / "edge" / "docs").keys()) == 2
    writer = EdgeClient(tmp_path / "edge")
    try:
        writer.delete("docs", points_selector=models.Filter(must=[_source("tents.md")]))
        # Written: unsealed, so nothing is answered from what the seal said.
        assert not (tmp_path / "edge" / "docs" / CHECKSUM_FILE).exists()
        assert writer.count("docs").count == len(DOCS) - 1
    finally:
        writer.close()
    reader = EdgeClient(tmp_path / "edge")
    try:
        assert reader.count("docs").count == len(DOCS) - 1
        hits = reader.facet("docs", key="source", limit=100, exact=True).hits
        assert sum(h.count for h in hits) == len(DOCS) - 1 and not reader._shards
    finally:
        reader.close()


def test_a_store_held_through_a_block_names_its_holder_to_one_that_cannot_wait(
    tmp_path, monkeypatch
):
    from archivist.tools import lease

    # How long one that cannot wait still waits for an idle holder to give the store up: 1 s
    # in place of 5 (a store of 3 chunks closes in milliseconds), and the busy holder's 5 too.
    monkeypatch.setattr(lease, "YIELD_WAIT", 1.0)
    first = EdgeClient(tmp_path / "edge")
    second = EdgeClient(tmp_path / "edge", wait=0)
    try:
        _fill(first)
        with first.hold():
            with pytest.raises(StoreLocked) as raised:
                second.count("docs")
            assert first.count("docs").count == len(DOCS)  # still its own
        assert f"in use by process {os.getpid()} (" in str(raised.value)
        assert "--wait" in str(raised.value)
        assert second.count("docs").count == len(DOCS)  # given up after the block
    finally:
        first.close()
        second.close()


def test_a_second_writer_that_cannot_wait_is_told_who_writes(tmp_path):
    first = EdgeClient(tmp_path / "edge")
    second = EdgeClient(tmp_path / "edge", wait=0.2)
    try:
        refused = pytest.raises(StoreLocked, match=f"being written by process {os.getpid()}")
        with first.writing(), refused, second.writing():
            pass
        with second.writing():
            _fill(second)
    finally:
        first.close()
        second.close()


def test_the_generation_moves_on_with_every_write_anyone_makes(tmp_path):
    first, second = EdgeClient(tmp_path / "edge"), EdgeClient(tmp_path / "edge")
    try:
        _fill(first)
        with second.hold():
            seen = second.generation
        with second.hold():
            assert second.generation == seen  # nobody wrote
        first.delete("docs", points_selector=models.Filter(must=[_source("tents.md")]))
        with second.hold():
            assert second.generation != seen
    finally:
        first.close()
        second.close()


def _source(name: str) -> models.FieldCondition:
    return models.FieldCondition(key="source", match=models.MatchValue(value=name))


def _legacy_store(home) -> list[str]:
    """A store as release 0.1 made it: qdrant-client local mode in home/qdrant."""
    legacy = QdrantClient(path=str(home / "qdrant"))
    store = KnowledgeStore(legacy, "old_docs")
    store.ensure(FINGERPRINT, "from the last release")
    chunks = [Chunk(text, source, n) for source, text, n in DOCS]
    totals = [2, 2, 2, 2, 1, 1]
    store.upsert(
        [
            ChunkWrite(c, embed_text(c.text, 64), "h1", n)
            for c, n in zip(chunks, totals, strict=True)
        ]
    )
    legacy.close()
    return [c.id for c in chunks]


def test_stores_of_the_last_release_are_moved_on_first_open_without_re_embedding(
    settings, ollama, capsys
):
    ids = _legacy_store(settings.home)
    app = Archivist(settings)
    try:
        store = app.store("old_docs", must_exist=False)
        assert store.description == "from the last release"
        assert store.fingerprint["embed_model"] == "hash"
        assert store.count() == len(DOCS)
        results = store.search(embed_text(DOCS[2][1], 64), "NW-TX-2290 spray", SearchRequest(k=1))
        assert results[0]["chunk_id"] == ids[2] and results[0]["source"] == "boots.md"
        assert store.sources()["refund.md"].complete
    finally:
        app.close()
    assert ollama.requests_to("/api/embed") == []
    assert "Moved 1 store(s) (old_docs)" in capsys.readouterr().err
    assert not (settings.home / "qdrant").exists()
    assert (settings.home / "qdrant.migrated" / "meta.json").is_file()
    # The next open finds nothing to move: a store deleted now stays deleted.
    again = Archivist(settings)
    again.store("old_docs", must_exist=False).drop()
    again.close()
    third = Archivist(settings)
    assert not third.store("old_docs", must_exist=False).exists()
    third.close()


def test_an_interrupted_move_is_done_again(tmp_path):
    _legacy_store(tmp_path)
    target = EdgeClient(tmp_path / "edge")
    try:
        # What a crash halfway through leaves: the collection made, its marker still there.
        target.create_collection(
            "old_docs",
            vectors_config={DENSE: models.VectorParams(size=64, distance=models.Distance.COSINE)},
        )
        (tmp_path / "edge" / f"old_docs.{MIGRATING_FILE}").touch()
        assert migrate_legacy(tmp_path / "qdrant", target) == ["old_docs"]
        assert target.count("old_docs").count == len(DOCS)
        assert not (tmp_path / "edge" / f"old_docs.{MIGRATING_FILE}").exists()
        stored = json.loads((tmp_path / "edge" / "old_docs" / COLLECTION_FILE).read_text())
        assert stored["metadata"]["archivist"]["description"] == "from the last release"
    finally:
        target.close()


class Killed(BaseException):
    """Stands for the process dying at the exact step."""


class DiesAt:
    """An EdgeClient that dies right after its `fatal`-th write."""

    def __init__(self, client: EdgeClient, fatal: int) -> None:
        self.client, self.fatal, self.writes = client, fatal, 0

    def __getattr__(self, name: str):
        attr = getattr(self.client, name)
        if name not in ("create_collection", "create_payload_index", "upsert"):
            return attr

        def write(*args, **kwargs):
            done = attr(*args, **kwargs)
            self.writes += 1
            if self.writes == self.fatal:
                raise Killed
            return done

        return write


def test_a_move_killed_at_any_step_is_done_again_whole(tmp_path):
    _legacy_store(tmp_path)
    target = EdgeClient(tmp_path / "edge")
    killed_at = []
    try:
        for fatal in range(1, 20):
            try:
                migrate_local(tmp_path / "qdrant", DiesAt(target, fatal), batch=2)
            except Killed:
                killed_at.append(fatal)
            else:
                break
            # The next open moves the store again, whole, rather than take the part as done.
            assert migrate_legacy(tmp_path / "qdrant", target) == ["old_docs"]
            assert target.count("old_docs").count == len(DOCS)
            (tmp_path / "qdrant.migrated").rename(tmp_path / "qdrant")
            target.delete_collection("old_docs")
    finally:
        target.close()
    # Create, index, three batches of two points: each step was cut once.
    assert killed_at == [1, 2, 3, 4, 5]


def test_the_sample_store_ingests_into_edge_and_searches(archivist):
    report = archivist.ingest([str(SHOP)], "shop_docs")
    assert report.points > 0 and not report.failed
    assert (archivist.settings.home / "edge" / "shop_docs" / COLLECTION_FILE).is_file()
    assert archivist.search("refund days", "shop_docs")[0]["source"].startswith("refund")


def test_writes_survive_a_process_that_dies_without_closing(tmp_path):
    # The first write after opening is flushed; the delete right after it is only in the
    # write-ahead log when the process dies.
    script = f"""
import os, sys
sys.path[:0] = ["tests", "."]
from pathlib import Path
from edge_samples import fill
from archivist.tools import points as models
from archivist.tools.edge import EdgeClient
client = EdgeClient(Path({str(tmp_path / "edge")!r}))
fill(client, models)
below_3 = models.Filter(must=[models.FieldCondition(key="n", match=models.MatchAny(any=[1, 2]))])
client.delete("docs", points_selector=below_3)
os._exit(0)
"""
    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)
    client = EdgeClient(tmp_path / "edge")
    try:
        assert client.count("docs").count == len(DOCS) - 2
    finally:
        client.close()


def test_a_reader_closing_for_its_exit_leaves_the_store_as_sealed_and_free(tmp_path):
    # A one-shot command's store, closed for the exit that follows: the shard it only read
    # is left open to the exit (its files stay in the page cache), the seal written before.
    # The next process opens it at once, finds every file as sealed, and writes to it.
    client = EdgeClient(tmp_path / "edge")
    fill(client, models)
    client.close()
    script = f"""
import os, sys
from pathlib import Path
from archivist.tools.edge import EdgeClient
from archivist.tools.edge.client import exit_follows
client = EdgeClient(Path({str(tmp_path / "edge")!r}))
print(len(client.scroll("docs", limit=100)[0]), flush=True)  # the shard opened, read
with exit_follows():
    client.close()
print(client._left, flush=True)
os._exit(0)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], check=True, cwd=ROOT, capture_output=True, text=True
    )
    assert done.stdout.split() == [str(len(DOCS)), "True"]
    assert read_seal(tmp_path / "edge" / "docs").files
    client = EdgeClient(tmp_path / "edge", wait=0)
    try:
        assert client.count("docs").count == len(DOCS)
        client.delete("docs", points_selector=models.Filter(must=[]))
        assert client.count("docs").count == 0
    finally:
        client.close()


@pytest.fixture
def gate(tmp_path):
    """A file whose creation lets a gated index build go on; created at the end in any case."""
    path = tmp_path / "gate"
    yield path
    path.touch()


def test_a_growing_store_is_indexed_a_segment_at_a_time_by_a_child_while_writes_go_on(
    tmp_path, monkeypatch, gate, capfd
):
    small_segments(monkeypatch, gate)
    vectors = random_vectors(650)
    client = dense_store(tmp_path / "edge", models)

    def indexed() -> tuple[int, int]:
        info = client.get_collection("docs")
        return info.indexed_vectors_count, info.segments_count

    grow(client, models, vectors, 0, 300)
    # The segment due at 250 points is with the child, which opened the shard (Edge lets one
    # process at a time: this one closed it) and waits at the gate; the next write waits here.
    build = client._indexing["docs"]
    assert build.running and sum(points for _, points in build.pending) == 50
    assert "Indexing store 'docs' (250 chunks)" in capfd.readouterr().err
    gate.touch()
    assert client.count("docs").count == 300  # waits for the child, then applies the write
    assert indexed()[0] >= 240  # indexed while it grew, before any close
    assert "Indexed 'docs' in" in capfd.readouterr().err
    grow(client, models, vectors, 300, 650)
    assert client.count("docs").count == 650
    during = indexed()
    assert 480 <= during[0] < 650 and during[1] >= 2  # several segments, a tail unindexed
    client.close()
    assert capfd.readouterr().err.count("Indexing store 'docs'") == 2  # the second, and at close
    client = EdgeClient(tmp_path / "edge")
    assert indexed()[0] == 650  # the tail at close
    for i in (0, 249, 250, 333, 649):  # each vector still finds itself first
        hits = _query(client, vectors[i].tolist(), DENSE, 1)
        assert hits.points[0].id == i
    client.close()


def test_writes_kept_during_a_build_are_applied_in_their_order_a_slice_per_later_write(
    tmp_path, monkeypatch, gate
):
    from archivist.tools.edge import indexing

    small_segments(monkeypatch, gate)
    monkeypatch.setattr(indexing, "BACKLOG_SLICE", 2)
    vectors = random_vectors(400)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 250)
    assert client._indexing["docs"].running
    first_ten = models.Filter(
        must=[models.FieldCondition(key="n", match=models.MatchAny(any=list(range(10))))]
    )
    client.delete("docs", points_selector=first_ten)
    client.upsert("docs", [models.PointStruct(id=3, vector={DENSE: vectors[3].tolist()})])
    grow(client, models, vectors, 250, 300)
    gate.touch()
    client._indexing["docs"].process.wait()
    grow(client, models, vectors, 300, 350)  # applies two kept writes first, then waits its turn
    assert len(client._backlog["docs"]) == 2
    assert client.count("docs").count == 350 - 9  # a read applies the rest, in order
    assert "docs" not in client._backlog
    kept = {p.id for p in client.scroll("docs", limit=400)[0]}
    assert kept == {3, *range(10, 350)}
    client.close()


def test_writes_not_yet_applied_when_the_next_segment_is_due_wait_for_its_build(
    tmp_path, monkeypatch, gate, capfd
):
    from archivist.tools.edge import indexing

    small_segments(monkeypatch, gate)
    monkeypatch.setattr(indexing, "BACKLOG_SLICE", 1)  # one kept write applied per later write
    monkeypatch.setattr(indexing, "INDEX_CHECK_POINTS", 10)
    monkeypatch.setattr(indexing, "INDEXING_THRESHOLD_KB", 15)  # a segment: 60 points
    vectors = random_vectors(300)
    client = dense_store(tmp_path / "edge", models)

    def one_at_a_time(start: int, stop: int) -> None:
        for i in range(start, stop):
            point = models.PointStruct(id=i, vector={DENSE: vectors[i].tolist()}, payload={"n": i})
            client.upsert("docs", [point])

    grow(client, models, vectors, 0, 100)  # the first segment goes to the child
    one_at_a_time(100, 200)  # 100 writes kept
    gate.touch()
    client._indexing["docs"].process.wait()
    # Each write applies one kept write and joins the queue: the backlog stays 100 long while
    # the shard's unindexed part grows to the next segment, whose build takes the backlog.
    one_at_a_time(200, 300)
    assert capfd.readouterr().err.count("Indexing store 'docs'") >= 2  # not 1: no waiting
    assert client.count("docs").count == 300
    assert sorted(p.id for p in client.scroll("docs", limit=1000)[0]) == list(range(300))
    client.close()
    client = EdgeClient(tmp_path / "edge")
    assert client.get_collection("docs").indexed_vectors_count == 300
    client.close()


def test_a_writer_faster_than_the_build_keeps_two_segments_at_most_then_waits_for_it(
    tmp_path, monkeypatch, gate
):
    small_segments(monkeypatch, gate)  # a segment: 240 points of 64 dimensions
    vectors = random_vectors(750)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 250)
    build = client._indexing["docs"]
    grow(client, models, vectors, 250, 700)  # 450 points kept while the child waits at the gate
    assert build.running and build.kept == 450
    threading.Timer(0.3, gate.touch).start()
    grow(client, models, vectors, 700, 750)  # 500 would be more than two: waits for the build
    assert "docs" not in client._indexing and not build.running
    assert client.count("docs").count == 750
    assert client.get_collection("docs").indexed_vectors_count >= 240
    client.close()


def test_a_writer_that_only_writes_indexes_its_segments_itself(tmp_path, monkeypatch, capfd):
    small_segments(monkeypatch)
    vectors = random_vectors(300)
    client = dense_store(tmp_path / "edge", models, aside=False)  # a copy: nothing to keep going
    grow(client, models, vectors, 0, 300)
    assert not client._indexing and client.get_collection("docs").indexed_vectors_count >= 240
    assert "Indexed 'docs' in" in capfd.readouterr().err
    client.close()


def test_an_ingest_has_its_segments_indexed_by_a_child(archivist, tmp_path, monkeypatch):
    from archivist.tools.edge import indexing

    marker = tmp_path / "child-ran"
    # 768-d chunks: a segment is every ~10 of them.
    monkeypatch.setattr(indexing, "INDEXING_THRESHOLD_KB", 30)
    monkeypatch.setattr(indexing, "INDEX_CHECK_POINTS", 5)
    program = f"open({str(marker)!r}, 'w').close()\n" + indexing.INDEX_PROGRAM
    monkeypatch.setattr(indexing, "INDEX_PROGRAM", program)
    report = archivist.ingest([str(SHOP)], "shop_docs")
    assert report.points >= 20 and marker.exists()
    assert archivist.search("refund days", "shop_docs")[0]["source"].startswith("refund")


def test_an_ingest_near_its_end_has_its_store_compacted_beside_its_last_requests(
    archivist, tmp_path, monkeypatch
):
    from archivist.ingest import graph
    from archivist.tools.edge import indexing

    for i in range(96):  # six load steps of 16 files, a chunk each
        (tmp_path / "docs" / f"note-{i:02}.md").parent.mkdir(exist_ok=True)
        (tmp_path / "docs" / f"note-{i:02}.md").write_text(f"# Note {i}\n\nParcel {i} ships.\n")
    monkeypatch.setattr(indexing, "COMPACT_POINTS", 30)
    monkeypatch.setattr(graph, "COMPACT_AHEAD", 28)
    asked, compactions = [], []
    ask = KnowledgeStore.compact_aside

    def compact_aside(store):
        asked.append((store.count(), ask(store)))
        return asked[-1][1]

    monkeypatch.setattr(KnowledgeStore, "compact_aside", compact_aside)
    monkeypatch.setattr(EdgeClient, "_compact", lambda *args: compactions.append(args))
    report = archivist.ingest([str(tmp_path / "docs")], "notes", batch_size=1)
    archivist.close()
    # Asked once, at the fifth step: 16 files left, at most 8 chunks in flight (two requests
    # queued per one sent, 4 sent at a time), none of it earlier; the close compacted nothing
    # (fewer than 30 came after).
    assert report.points == 96 and len(asked) == 1 and compactions == []
    assert 72 <= asked[0][0] <= 80 and asked[0][1] is True
    config = json.loads((archivist.settings.store_path / "notes" / COLLECTION_FILE).read_text())
    assert config["compacted"] is True
    app = Archivist(archivist.settings)
    assert app.search("Parcel 95 ships", "notes")[0]["source"].endswith("note-95.md")
    app.close()


def test_a_child_that_fails_to_index_loses_nothing_and_this_process_indexes_instead(
    tmp_path, monkeypatch, capfd
):
    from archivist.tools.edge import indexing

    small_segments(monkeypatch)
    monkeypatch.setattr(indexing, "INDEX_PROGRAM", "raise SystemExit('no room for the index')")
    vectors = random_vectors(650)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 250)
    client._indexing["docs"].process.wait()  # failed
    grow(client, models, vectors, 250, 650)
    assert client.count("docs").count == 650
    err = capfd.readouterr().err
    assert (
        "Indexing 'docs' in a helper process failed (no room for the index); this process "
        "indexes it from now on." in err
    )
    assert "Indexed 'docs' in" in err  # the next segment, here
    client.close()
    client = EdgeClient(tmp_path / "edge")
    assert client.get_collection("docs").indexed_vectors_count == 650
    assert _query(client, vectors[400].tolist(), DENSE, 1).points[0].id == 400
    client.close()


def test_where_no_child_can_start_the_segment_is_indexed_here(tmp_path, monkeypatch, capfd):
    from archivist.tools.edge import indexing

    def no_processes(*args, **kwargs):
        raise OSError(11, "Resource temporarily unavailable")

    small_segments(monkeypatch)
    monkeypatch.setattr(indexing.subprocess, "Popen", no_processes)
    vectors = random_vectors(300)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 300)
    assert not client._indexing and client.count("docs").count == 300
    assert client.get_collection("docs").indexed_vectors_count >= 240
    assert capfd.readouterr().err.count("Indexing store 'docs' (250 chunks)") == 1
    client.close()


def test_the_child_indexing_a_segment_holds_the_store_if_its_parent_dies(
    tmp_path, monkeypatch, gate
):
    script = f"""
import os, sys
sys.path[:0] = ["tests", "."]
from pathlib import Path
import pytest
from edge_samples import dense_store, grow, random_vectors, small_segments
from archivist.tools import points as models
from archivist.tools.search import SearchRequest
monkeypatch = pytest.MonkeyPatch()
small_segments(monkeypatch, Path({str(gate)!r}))
client = dense_store(Path({str(tmp_path / "edge")!r}), models)
grow(client, models, random_vectors(300), 0, 300)
assert client._indexing["docs"].running
os._exit(0)  # dies: the write kept for after the build is lost, the child goes on
"""
    from archivist.tools import lease

    subprocess.run([sys.executable, "-c", script], check=True, cwd=ROOT)
    monkeypatch.setattr(lease, "YIELD_WAIT", 0.2)  # no holder left to give it up
    with pytest.raises(StoreLocked):  # the child has the shard open: nobody else opens it
        EdgeClient(tmp_path / "edge", wait=0.2).count("docs")
    gate.touch()
    client = EdgeClient(tmp_path / "edge", wait=30)
    try:
        assert client.count("docs").count == 250  # what was written before the build
        assert client.get_collection("docs").indexed_vectors_count >= 240
    finally:
        client.close()


def test_room_check_skips_a_folder_another_process_removes_during_the_walk(tmp_path, monkeypatch):
    client = EdgeClient(tmp_path / "qdrant")
    going = tmp_path / "qdrant" / "zz_rebuild"
    (going / "segments").mkdir(parents=True)
    real_scandir = os.scandir

    def scandir_after_the_rebuild_ended(path="."):
        if os.fspath(path).startswith(str(going)):  # listed in its parent, gone when opened
            raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir_after_the_rebuild_ended)
    client._check_room()  # no FileNotFoundError: the vanished folder is skipped
    monkeypatch.undo()
    client.close()


def _segment_graphs(path) -> list[tuple[str, int]]:
    """Each segment's dense index as its own files say: ('plain', 0) or ('hnsw', m)."""
    found = []
    for file in sorted((path / "docs" / "shard").glob("segments/*/segment.json")):
        index = json.loads(file.read_text())["config"]["vector_data"][DENSE]["index"]
        found.append((index["type"], index.get("options", {}).get("m", 0)))
    return found


def _nearest(client, vectors, ids) -> list[list[tuple[str, float]]]:
    return [_ranked(_query(client, vectors[i].tolist(), DENSE, 10)) for i in ids]


def test_a_store_written_past_the_compaction_size_is_compacted_at_close_and_searches_the_same(
    tmp_path, monkeypatch
):
    from archivist.tools.edge import indexing

    vectors = random_vectors(160)
    for folder, size in (("kept", 10**9), ("compacted", 100)):
        monkeypatch.setattr(indexing, "COMPACT_POINTS", size)
        client = dense_store(tmp_path / folder, models)
        grow(client, models, vectors, 0, 150)
        client.close()
    # One segment closed to writes, with no graph (searched exactly), and an empty one open.
    assert sorted(_segment_graphs(tmp_path / "compacted")) == [("hnsw", 0), ("plain", 0)]
    assert _segment_graphs(tmp_path / "kept") == [("plain", 0)]
    config = json.loads((tmp_path / "compacted" / "docs" / COLLECTION_FILE).read_text())
    assert config["compacted"] is True
    kept, compacted = EdgeClient(tmp_path / "kept"), EdgeClient(tmp_path / "compacted")
    assert _nearest(kept, vectors, range(0, 150, 7)) == _nearest(
        compacted, vectors, range(0, 150, 7)
    )
    kept.close()
    # Fewer points than a compaction's size written later stay in the segment open to writes.
    compacted.upsert(
        "docs",
        [models.PointStruct(id=i, vector={DENSE: vectors[i].tolist()}) for i in range(150, 160)],
    )
    compacted.close()
    assert sorted(_segment_graphs(tmp_path / "compacted")) == [("hnsw", 0), ("plain", 0)]
    client = EdgeClient(tmp_path / "compacted")
    assert client.count("docs").count == 160
    assert _query(client, vectors[155].tolist(), DENSE, 1).points[0].id == 155
    client.close()


def test_a_writer_near_its_end_has_the_store_compacted_by_a_child_and_its_close_adds_nothing(
    tmp_path, monkeypatch, capfd
):
    from archivist.tools.edge import indexing

    monkeypatch.setattr(indexing, "COMPACT_POINTS", 100)
    gate = tmp_path / "gate"
    held = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.01)\n"
    monkeypatch.setattr(indexing, "COMPACT_PROGRAM", held + indexing.COMPACT_PROGRAM)
    vectors = random_vectors(200)
    kept = dense_store(tmp_path / "kept", models, aside=False)
    grow(kept, models, vectors, 0, 150)
    assert not kept.compact_aside("docs")  # a writer that only writes compacts at close
    grow(kept, models, vectors, 150, 200)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 50)
    assert not client.compact_aside("docs")  # too few points for a compaction
    grow(client, models, vectors, 50, 150)
    assert client.compact_aside("docs")
    child = client._indexing["docs"].process
    grow(client, models, vectors, 150, 200)  # kept while the child compacts
    assert child.poll() is None
    gate.touch()
    compactions = []
    monkeypatch.setattr(EdgeClient, "_compact", lambda *args: compactions.append(args))
    client.close()
    assert child.returncode == 0 and compactions == []
    # The 150 in a segment closed to writes, with no graph; the 50 written later open to them.
    assert sorted(_segment_graphs(tmp_path / "edge")) == [("hnsw", 0), ("plain", 0)]
    config = json.loads((tmp_path / "edge" / "docs" / COLLECTION_FILE).read_text())
    assert config["compacted"] is True
    assert "Index" not in capfd.readouterr().err  # a compaction is not an index build
    client = EdgeClient(tmp_path / "edge")
    assert client.count("docs").count == 200
    assert _nearest(client, vectors, range(0, 200, 9)) == _nearest(kept, vectors, range(0, 200, 9))
    client.close()
    kept.close()


def test_a_child_that_fails_to_compact_loses_nothing_and_the_close_compacts_instead(
    tmp_path, monkeypatch, capfd
):
    from archivist.tools.edge import indexing

    monkeypatch.setattr(indexing, "COMPACT_POINTS", 100)
    monkeypatch.setattr(indexing, "COMPACT_PROGRAM", "raise SystemExit('no room for it')")
    vectors = random_vectors(200)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 150)
    assert client.compact_aside("docs")
    client._indexing["docs"].process.wait()  # failed
    grow(client, models, vectors, 150, 200)
    client.close()
    assert (
        "Compacting 'docs' in a helper process failed (no room for it); this process "
        "compacts it from now on." in capfd.readouterr().err
    )
    assert sorted(_segment_graphs(tmp_path / "edge")) == [("hnsw", 0), ("plain", 0)]
    client = EdgeClient(tmp_path / "edge")
    assert client.count("docs").count == 200
    assert _query(client, vectors[170].tolist(), DENSE, 1).points[0].id == 170
    client.close()


def test_a_compacted_store_that_grows_to_an_index_gets_its_graph(tmp_path, monkeypatch, capfd):
    from archivist.tools.edge import indexing

    small_segments(monkeypatch)  # an index once 240 vectors are unindexed
    monkeypatch.setattr(indexing, "COMPACT_POINTS", 100)
    vectors = random_vectors(300)
    client = dense_store(tmp_path / "edge", models)
    grow(client, models, vectors, 0, 150)
    client.close()
    assert ("hnsw", 0) in _segment_graphs(tmp_path / "edge")
    client = EdgeClient(tmp_path / "edge")
    client.aside_block = client.indexing_aside()
    client.aside_block.__enter__()
    # The compacted 150 count as unindexed: the build is due at 250, by a child.
    grow(client, models, vectors, 150, 300)
    assert "Indexing store 'docs' (250 chunks)" in capfd.readouterr().err
    client.close()
    graphs = _segment_graphs(tmp_path / "edge")
    assert ("hnsw", indexing.HNSW_M) in graphs and ("hnsw", 0) not in graphs
    config = json.loads((tmp_path / "edge" / "docs" / COLLECTION_FILE).read_text())
    assert "compacted" not in config
    client = EdgeClient(tmp_path / "edge")
    assert client.count("docs").count == 300
    assert [_query(client, vectors[i].tolist(), DENSE, 1).points[0].id for i in (5, 149, 290)] == [
        5,
        149,
        290,
    ]
    client.close()


def test_a_seal_keeps_each_answer_in_a_file_read_only_when_asked(tmp_path):
    (counted,), folder = _sealed(tmp_path, "source")
    sealed = json.loads((folder / CHECKSUM_FILE).read_text())
    # The seal holds the checksums, the counts and the answers' file names, not the answers.
    assert sealed["counts"][0] == len(DOCS) and "tents.md" not in json.dumps(sealed)
    (answer,) = sealed["answers"].values()
    assert json.loads((folder / "answers" / answer).read_text()) == [
        [hit.value, hit.count] for hit in counted.hits
    ]
    reader = EdgeClient(tmp_path / "edge")
    try:
        assert reader.count("docs").count == len(DOCS)  # the answer's file is not read
        assert reader._answers["docs"].values == {}
        assert reader.facet("docs", key="source", limit=100, exact=True) == counted
        assert not reader._shards
    finally:
        reader.close()
    # An answer's file gone is no damage: the shard is asked again, and the answer kept anew.
    shutil.rmtree(folder / "answers")
    reader = EdgeClient(tmp_path / "edge")
    try:
        assert reader.facet("docs", key="source", limit=100, exact=True) == counted
        assert reader._shards
    finally:
        reader.close()
    assert read_seal(folder).get(facet_key("source", 100, True)) == [
        [hit.value, hit.count] for hit in counted.hits
    ]


def test_a_seal_of_the_earlier_format_answers_and_is_written_anew_when_closed(tmp_path):
    (counted,), folder = _sealed(tmp_path, "source")
    # The seal as the previous release wrote it: every answer in it.
    sealed = read_seal(folder)
    (key,) = sealed.keys()
    earlier = {
        "format": 2,
        "files": sealed.files,
        "answers": {"counts": sealed.counts, "facets": {key: sealed.get(key)}},
    }
    (folder / CHECKSUM_FILE).write_text(json.dumps(earlier))
    shutil.rmtree(folder / "answers")
    reader = EdgeClient(tmp_path / "edge")
    try:
        assert reader.count("docs").count == len(DOCS)
        assert reader.facet("docs", key="source", limit=100, exact=True) == counted
        assert not reader._shards
    finally:
        reader.close()
    rewritten = json.loads((folder / CHECKSUM_FILE).read_text())
    assert rewritten["format"] == 3 and list(rewritten["answers"]) == [key]
    assert read_seal(folder).get(key) == [[h.value, h.count] for h in counted.hits]


def test_a_value_remembered_with_the_seal_is_read_back_until_the_next_write(tmp_path):
    _sealed(tmp_path)
    computed = []

    def remembered() -> object:
        client = EdgeClient(tmp_path / "edge")

        def compute():
            computed.append(1)
            every = models.Filter(must=[])
            return {"chunks": client.count("docs", count_filter=every, exact=True).count}

        try:
            return client.remembered("docs", "summary", compute)
        finally:
            client.close()

    assert remembered() == {"chunks": len(DOCS)} and len(computed) == 1
    assert remembered() == {"chunks": len(DOCS)} and len(computed) == 1  # read back
    writer = EdgeClient(tmp_path / "edge")
    try:
        writer.delete("docs", points_selector=models.Filter(must=[_source("tents.md")]))
        # Written under this lease: computed, not read back nor kept.
        assert writer.remembered("docs", "summary", lambda: "now") == "now"
    finally:
        writer.close()
    assert remembered() == {"chunks": len(DOCS) - 1} and len(computed) == 2
    assert remembered() == {"chunks": len(DOCS) - 1} and len(computed) == 2


def test_opening_checks_small_sealed_files_whole_and_large_ones_by_size_and_time(tmp_path):
    _, folder = _sealed(tmp_path)
    shard = folder / "shard"
    sealed = json.loads((folder / CHECKSUM_FILE).read_text())["files"]
    small = next(shard / k for k, v in sealed.items() if 0 < v[1] <= WHOLE_CHECK_BYTES)
    large = next(
        shard / k
        for k, v in sealed.items()
        if v[1] > WHOLE_CHECK_BYTES and any((shard / k).read_bytes()[:4096])
    )

    def flip(path) -> None:
        """Change a byte of the file's data and set its times back to what they were."""
        stat = path.stat()
        data = bytearray(path.read_bytes())
        at = next(i for i, b in enumerate(data) if b)
        data[at] ^= 0xFF
        path.write_bytes(bytes(data))
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))

    def opened() -> str | None:
        client = EdgeClient(tmp_path / "edge")
        try:
            client.count("docs", count_filter=models.Filter(must=[_source("tents.md")]))
        except StoreDamaged as exc:
            return exc.what
        finally:
            client.close()
        return None

    # A small file is read at every opening, whatever its time says.
    original = small.read_bytes()
    flip(small)
    assert small.name in (opened() or "")
    small.write_bytes(original)
    os.utime(small, ns=(small.stat().st_atime_ns, sealed[small.relative_to(shard).as_posix()][2]))
    assert opened() is None
    # A large one whose size and time are those sealed is taken as sealed; written to (its
    # time changed), it is read whole and its change found.
    flip(large)
    assert opened() is None
    large.touch()
    assert large.name in (opened() or "")


@pytest.mark.parametrize("n", [1, 8, 9, 100])
def test_an_upsert_stores_each_of_its_points_once_whatever_its_size(tmp_path, n):
    """An upsert's last points are written as an update of their own (the one Edge reads
    again at every load): every point is stored once, with its payload, before and after the
    store is closed and opened again, and again after a second upsert of the same points."""
    vectors = random_vectors(n)
    client = dense_store(tmp_path / "edge", models, aside=False)
    write = [
        models.PointStruct(id=i, vector={DENSE: vectors[i].tolist()}, payload={"n": i})
        for i in range(n)
    ]
    client.upsert("docs", write)
    for again in (False, True):
        if again:
            client.upsert("docs", write)
        client.close()
        client = EdgeClient(tmp_path / "edge")
        points, _ = client.scroll("docs", limit=1000, with_payload=True)
        assert client.count("docs").count == n
        assert sorted((p.id, p.payload["n"]) for p in points) == [(i, i) for i in range(n)]
    client.close()
