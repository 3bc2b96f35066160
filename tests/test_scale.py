"""Stores laid out for their size: a store's dense vectors on disk, searched through a 2-bit
copy (an int8 one for a store put on disk before) and rescored on the vectors themselves,
find what a store kept in memory finds; a store made in memory opens as it is and moves to
disk once it is indexed; the layout follows ARCHIVIST_STORE_LAYOUT; a server is sent the
same layout at creation."""

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from edge_samples import small_segments

from archivist.app import Archivist
from archivist.settings import load_settings
from archivist.tools import points
from archivist.tools.edge import EdgeClient
from archivist.tools.errors import ArchivistError
from archivist.tools.search import SearchRequest
from archivist.tools.store import (
    DENSE,
    HNSW_EF,
    OVERSAMPLING,
    SPARSE,
    Chunk,
    ChunkWrite,
    KnowledgeStore,
    ServerLayout,
    dense_params,
)

DIMENSION = 64
FINGERPRINT = {
    "embed_model": "fake",
    "dimension": DIMENSION,
    "document_prefix": "",
    "query_prefix": "",
}
WORDS = "refund boots tent stove receipt parcel courier voucher zipper 退货 发票 保修".split()


def _vectors(count: int, seed: int = 5) -> np.ndarray:
    vectors = np.random.default_rng(seed).standard_normal((count, DIMENSION)).astype(np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def _text(i: int) -> str:
    return f"{WORDS[i % len(WORDS)]} {WORDS[i * 7 % len(WORDS)]} {i}"


def _write(store: KnowledgeStore, start: int, stop: int) -> None:
    """Store chunks `start`..`stop` (their vectors and texts the same in every store)."""
    vectors = _vectors(stop)
    for first in range(start, stop, 500):
        last = min(stop, first + 500)
        store.upsert(
            [
                ChunkWrite(
                    Chunk(_text(i), f"d{i // 4}.md", i % 4),
                    vectors[i].tolist(),
                    "h",
                    4,
                )
                for i in range(first, last)
            ]
        )


def _filled(path: Path, layout: str, chunks: int = 2_400) -> None:
    """A store of `chunks` chunks written by a client of `layout`, closed (so compacted)."""
    client = EdgeClient(path, layout=layout)
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    _write(store, 0, chunks)
    client.close()


def _settings(path: Path) -> dict[str, Any]:
    return json.loads((path / "docs" / "collection.json").read_text(encoding="utf-8"))


def _segments(path: Path) -> list[dict[str, Any]]:
    """The dense vector settings of each segment, as its own file states them."""
    found = []
    for file in sorted((path / "docs" / "shard" / "segments").glob("*/segment.json")):
        found.append(json.loads(file.read_text())["config"]["vector_data"][DENSE])
    return found


def _quantized(segment: dict[str, Any], kind: str = "turbo2") -> bool:
    """Whether a segment searches a copy of its dense vectors of `kind`: "turbo2" (2 bits a
    dimension, what a store put on disk gets) or "int8" (a store put on disk before)."""
    config = segment.get("quantization_config") or {}
    if kind == "int8":
        return config.get("scalar", {}).get("type") == "int8"
    return config.get("turbo", {}).get("bits") == "bits2"


def _searches(path: Path, layout: str, queries: np.ndarray, mode: str) -> list[list[tuple]]:
    client = EdgeClient(path, layout=layout)
    store = KnowledgeStore(client, "docs")
    request = SearchRequest(k=10, mode=mode)
    try:
        found = [store.search(q.tolist(), "refund 退货", request) for q in queries]
        return [[(p["chunk_id"], round(p["score"], 5)) for p in passages] for passages in found]
    finally:
        client.close()


def _raw_scores(path: Path, query: np.ndarray, params: Any = None) -> list[float]:
    """The engine's own dense scores for `query`, searched with `params` (None: its defaults)."""
    client = EdgeClient(path)
    try:
        request = points.QueryRequest(query=query.tolist(), using=DENSE, limit=10, params=params)
        found = client.query_batch_points("docs", requests=[request])[0].points
        return [p.score for p in found]
    finally:
        client.close()


def test_a_store_on_disk_finds_what_a_store_in_memory_finds(tmp_path):
    _filled(tmp_path / "memory", "memory")
    _filled(tmp_path / "disk", "disk")

    assert _settings(tmp_path / "memory")["vectors_on_disk"] is False
    assert _settings(tmp_path / "disk")["vectors_on_disk"] is True
    assert not any(_quantized(s) for s in _segments(tmp_path / "memory"))
    closed = [s for s in _segments(tmp_path / "disk") if s["index"]["type"] == "hnsw"]
    assert closed and all(_quantized(s) and s["storage_type"] == "Mmap" for s in closed)

    queries = _vectors(25, seed=11)
    for mode in ("dense", "hybrid"):
        exact = _searches(tmp_path / "memory", "memory", queries, mode)
        quantized = _searches(tmp_path / "disk", "disk", queries, mode)
        assert quantized == exact
        assert all(len(found) == 10 for found in exact)

    # The 2-bit copy is what is searched: unrescored, its scores are not the vectors' own.
    query = queries[0]
    exact_scores = _raw_scores(tmp_path / "disk", query, points.SearchParams(exact=True))
    copy_scores = _raw_scores(tmp_path / "disk", query)
    assert max(abs(a - b) for a, b in zip(exact_scores, copy_scores, strict=True)) > 1e-4


def test_a_store_made_in_memory_opens_as_it_is_and_moves_to_disk_when_indexed(
    tmp_path, monkeypatch
):
    small_segments(monkeypatch)  # an index every ~240 unindexed 64-d vectors
    path = tmp_path / "edge"
    # A store as this release's predecessor made it: indexed, its vectors in memory, and no
    # word of a layout in its settings file.
    client = EdgeClient(path, layout="memory")
    store = KnowledgeStore(client, "docs")
    store.ensure(FINGERPRINT)
    _write(store, 0, 600)
    client.close()
    settings = _settings(path)
    del settings["vectors_on_disk"]
    (path / "docs" / "collection.json").write_text(json.dumps(settings), encoding="utf-8")
    graphs = [s for s in _segments(path) if s["index"]["type"] == "hnsw"]
    assert graphs and not any(_quantized(s) or _quantized(s, "int8") for s in _segments(path))

    queries = _vectors(10, seed=12)
    before = _searches(path, "auto", queries, "dense")
    assert all(len(found) == 10 for found in before)
    assert "vectors_on_disk" not in _settings(path)  # read as it is
    assert not any(_quantized(s) for s in _segments(path))

    # It grows by more than a segment: its next index build puts it on disk, all of it.
    client = EdgeClient(path, layout="auto")
    _write(KnowledgeStore(client, "docs"), 600, 1_000)
    client.close()
    assert _settings(path)["vectors_on_disk"] is True
    indexed = [s for s in _segments(path) if s["index"]["type"] == "hnsw"]
    assert indexed and all(_quantized(s) for s in indexed)

    for query in queries:
        exact = _raw_scores(path, query, points.SearchParams(exact=True))
        assert _raw_scores(path, query, dense_params(points)) == pytest.approx(exact, abs=1e-6)
    assert all(len(found) == 10 for found in _searches(path, "auto", queries, "hybrid"))


def test_a_small_store_stays_in_memory_under_auto(tmp_path):
    _filled(tmp_path, "auto")
    assert _settings(tmp_path)["vectors_on_disk"] is False
    assert _segments(tmp_path) and not any(_quantized(s) for s in _segments(tmp_path))


def test_the_setting_chooses_the_layout(tmp_path):
    assert load_settings({}).store_layout == "auto"
    settings = load_settings({"ARCHIVIST_STORE_LAYOUT": "disk", "ARCHIVIST_HOME": str(tmp_path)})
    assert settings.store_layout == "disk"
    app = Archivist(settings)
    try:
        app.store("docs", must_exist=False).ensure(FINGERPRINT)
    finally:
        app.close()
    assert _settings(tmp_path / "edge")["vectors_on_disk"] is True
    served = load_settings({"ARCHIVIST_STORE_LAYOUT": "memory", "QDRANT_URL": "http://q:6333"})
    assert served.server_layout.vectors == "memory"
    with pytest.raises(ArchivistError) as refused:
        load_settings({"ARCHIVIST_STORE_LAYOUT": "ssd"})
    assert "auto, memory, disk" in refused.value.fix


class RecordingServer:
    """A Qdrant server's client that records what the stores send it."""

    def __init__(self) -> None:
        self.created: dict[str, Any] = {}
        self.queries: list[Any] = []

    def collection_exists(self, collection_name: str) -> bool:
        return bool(self.created)

    def create_collection(self, collection_name: str, **options: Any) -> bool:
        self.created = options
        return True

    def create_payload_index(self, *args: Any, **kwargs: Any) -> None:
        return None

    def get_collection(self, collection_name: str) -> Any:
        metadata = self.created["metadata"]
        config = type("Config", (), {"metadata": metadata})()
        return type("Info", (), {"config": config, "payload_schema": {}})()

    def query_batch_points(self, collection_name: str, requests: list[Any]) -> list[Any]:
        from qdrant_client.http.models import QueryResponse

        self.queries.extend(requests)
        return [QueryResponse(points=[]) for _ in requests]


@pytest.mark.parametrize("vectors", ["auto", "disk"])
def test_a_server_is_sent_the_on_disk_layout(vectors):
    from qdrant_client import models

    server = RecordingServer()
    store = KnowledgeStore(server, "docs", ServerLayout(shard_number=2, vectors=vectors))
    store.ensure(FINGERPRINT)
    sent = server.created
    assert sent["shard_number"] == 2
    assert sent["vectors_config"][DENSE].on_disk is True
    assert sent["sparse_vectors_config"][SPARSE].index.on_disk is True
    assert sent["on_disk_payload"] is True
    assert sent["hnsw_config"].on_disk is True
    assert (sent["hnsw_config"].m, sent["hnsw_config"].ef_construct) == (16, 256)
    scalar = sent["quantization_config"].scalar
    assert scalar.type == models.ScalarType.INT8 and scalar.always_ram is True

    store.search(_vectors(1)[0].tolist(), "refund", SearchRequest(k=5, mode="hybrid"))
    dense = [r for r in server.queries if r.using == DENSE]
    assert len(dense) == 1
    assert dense[0].params.quantization.rescore is True
    assert dense[0].params.quantization.oversampling == OVERSAMPLING
    assert dense[0].params.hnsw_ef == HNSW_EF


@pytest.mark.parametrize("layout", [ServerLayout(), ServerLayout(vectors="memory")])
def test_a_server_in_memory_is_sent_its_defaults(layout):
    server = RecordingServer()
    KnowledgeStore(server, "docs", layout).ensure(FINGERPRINT)
    sent = server.created
    assert not {"on_disk_payload", "hnsw_config", "quantization_config"} & set(sent)
    assert sent["vectors_config"][DENSE].on_disk is None


def test_the_embedded_store_refuses_a_server_layout(tmp_path):
    client = EdgeClient(tmp_path)
    try:
        with pytest.raises(ValueError, match="lays out its stores itself"):
            client.create_collection(
                "docs",
                {DENSE: points.VectorParams(size=DIMENSION, distance=points.Distance.COSINE)},
                quantization_config=ServerLayout(vectors="disk").create_options()[
                    "quantization_config"
                ],
            )
        assert not client.collection_exists("docs")
    finally:
        client.close()


def test_a_store_put_on_disk_before_keeps_its_int8_copy_and_finds_the_same(tmp_path, monkeypatch):
    small_segments(monkeypatch)
    path = tmp_path / "edge"

    # As the previous release laid it out on disk: an int8 copy, no word of its kind.
    def as_before(config):
        config["vectors_on_disk"] = True

    with monkeypatch.context() as patch:
        for module in ("indexing", "client"):
            patch.setattr(f"archivist.tools.edge.{module}.put_on_disk", as_before)
        _filled(path, "disk", 600)
    assert "quantization" not in _settings(path)
    client = EdgeClient(path, layout="auto")
    _write(KnowledgeStore(client, "docs"), 600, 1_000)  # index builds rewrite segments
    client.close()
    indexed = [s for s in _segments(path) if s["index"]["type"] == "hnsw"]
    assert indexed and all(_quantized(s, "int8") for s in indexed)
    assert "quantization" not in _settings(path)
    _filled(tmp_path / "memory", "memory", 1_000)
    queries = _vectors(10, seed=13)
    for mode in ("dense", "hybrid"):
        assert _searches(path, "auto", queries, mode) == _searches(
            tmp_path / "memory", "memory", queries, mode
        )


def _advised(shard: Path, name: str = "inverted_index.dat") -> dict[str, bool]:
    """This process's mappings of a shard's files called `name`, by address range: whether
    each is advised random reads (`rr` among its flags in /proc/self/smaps)."""
    found: dict[str, bool] = {}
    prefix, mapped = str(shard.resolve()) + "/", None
    for line in Path("/proc/self/smaps").read_text().splitlines():
        fields = line.split()
        if "-" in fields[0] and len(fields) >= 6:
            named = fields[5].startswith(prefix) and fields[5].endswith("/" + name)
            mapped = fields[0] if named else None
        elif mapped is not None and fields[0] == "VmFlags:":
            found[mapped] = "rr" in fields[1:]
    return found


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="no /proc: nothing advised")
def test_an_opened_store_reads_its_keyword_index_a_page_at_a_time(tmp_path):
    import qdrant_edge as qe

    _filled(tmp_path, "disk")
    shard = tmp_path / "docs" / "shard"
    # Edge alone maps it to be read as the kernel reads any file: with pages around each.
    raw = qe.EdgeShard.load(str(shard))
    alone = _advised(shard)
    assert alone and not any(alone.values())
    raw.close()
    del raw
    # Edge may keep mappings of shards closed before (the writer's, the load above) a while:
    # they stay as they were, and only the mappings made from here on are Archivist's.
    before = _advised(shard)
    client = EdgeClient(tmp_path, layout="disk")
    try:
        store = KnowledgeStore(client, "docs")
        found = store.search(_vectors(1)[0].tolist(), "refund 退货", SearchRequest(k=5))
        assert len(found) == 5
        # Opened by Archivist, it is faulted in where a search reads it, nothing around it:
        # Linux reads up to read_ahead_kb (8 MB on some disks) around each fault otherwise.
        after = _advised(shard)
        assert any(after.values())
        assert all(advised for span, advised in after.items() if span not in before)
    finally:
        client.close()


def test_a_search_to_come_reads_a_store_on_disk_ahead_once(tmp_path, monkeypatch):
    from archivist.tools.edge import client as edge_client

    _filled(tmp_path, "disk")
    read: list[tuple[str, tuple[str, ...]]] = []
    monkeypatch.setattr(
        edge_client,
        "read_ahead",
        lambda shard, patterns: read.append((shard.parent.name, patterns)),
    )
    client = EdgeClient(tmp_path, layout="disk")
    try:
        store = KnowledgeStore(client, "docs")
        with client.hold():
            store.expect_search()
            # Asked before the shard is opened, for the files every dense search walks.
            assert read == [("docs", edge_client.SEARCHED_FILES)] and "docs" not in client._shards
            store.search(_vectors(1)[0].tolist(), "refund", SearchRequest(k=5))
            assert len(read) == 1  # not asked again when the search opens it
            store.expect_search()
            assert len(read) == 1  # nor once it is open
    finally:
        client.close()
    # A store in memory has nothing to read ahead.
    _filled(tmp_path / "small", "memory")
    client = EdgeClient(tmp_path / "small", layout="memory")
    try:
        KnowledgeStore(client, "docs").expect_search()
        assert len(read) == 1
    finally:
        client.close()
