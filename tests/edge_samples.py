"""Small stores for the engine tests, written with whichever records an engine takes
(`qdrant_client.models`, or `archivist.tools.points`, which Qdrant Edge reads too).

A process a test starts imports this module rather than the test module: it brings neither
conftest's application stack nor qdrant-client, seconds of CPU at each start.
"""

from pathlib import Path
from types import ModuleType
from typing import Any

from fake_ollama import embed_text

from archivist.tools.edge import EdgeClient
from archivist.tools.sparse import document_vector
from archivist.tools.store import DENSE, SPARSE, Chunk

DOCS = [
    ("refund.md", "refunds are paid within 30 days of delivery", 1),
    ("refund.md", "keep the receipt to ask for a refund", 2),
    ("boots.md", "boots NW-TX-2290 need wax-free spray", 3),
    ("boots.md", "boots are resoled for free in the first year", 4),
    ("tents.md", "tents are refunded only when unused", 5),
    ("退货.md", "退货须在三十天内申请", 6),
]


def fill(client: Any, records: ModuleType) -> list[str]:
    """Create the collection `docs` holding DOCS (dense and sparse vectors); return the ids."""
    client.create_collection(
        "docs",
        vectors_config={DENSE: records.VectorParams(size=64, distance=records.Distance.COSINE)},
        sparse_vectors_config={SPARSE: records.SparseVectorParams(modifier=records.Modifier.IDF)},
        metadata={"archivist": {"description": "d"}},
    )
    client.create_payload_index("docs", "source", records.PayloadSchemaType.KEYWORD)
    ids = [Chunk(text, source, n).id for source, text, n in DOCS]
    points = []
    for point_id, (source, text, n) in zip(ids, DOCS, strict=True):
        indices, values = document_vector(text)
        points.append(
            records.PointStruct(
                id=point_id,
                vector={
                    DENSE: embed_text(text, 64),
                    SPARSE: records.SparseVector(indices=indices, values=values),
                },
                payload={"source": source, "text": text, "n": n},
            )
        )
    client.upsert("docs", points=points, wait=True)
    return ids


def small_segments(monkeypatch: Any, gate: Path | None = None) -> None:
    """Thresholds for 64-d vectors (256 bytes each): index every ~240 unindexed vectors; with
    `gate`, the child indexing a segment waits until that file exists."""
    from archivist.tools.edge import indexing

    monkeypatch.setattr(indexing, "INDEXING_THRESHOLD_KB", 60)
    monkeypatch.setattr(indexing, "SEGMENT_KB", 70)
    monkeypatch.setattr(indexing, "TAIL_INDEX_KB", 20)
    monkeypatch.setattr(indexing, "INDEX_CHECK_POINTS", 50)
    if gate is not None:
        wait = (
            "import os, time\n"
            "for _ in range(6000):  # a minute at most, even if the test fails before opening it\n"
            f"    if os.path.exists({str(gate)!r}):\n"
            "        break\n"
            "    time.sleep(0.01)\n"
        )
        monkeypatch.setattr(indexing, "INDEX_PROGRAM", wait + indexing.INDEX_PROGRAM)


def grow(client: Any, records: ModuleType, vectors: Any, start: int, stop: int) -> None:
    """Upsert points `start`..`stop` of `vectors`, 50 a write."""
    for first in range(start, stop, 50):
        points = [
            records.PointStruct(id=i, vector={DENSE: vectors[i].tolist()}, payload={"n": i})
            for i in range(first, first + 50)
        ]
        client.upsert("docs", points)


def random_vectors(count: int) -> Any:
    import numpy as np

    return np.random.default_rng(5).standard_normal((count, 64)).astype(np.float32)


def dense_store(path: Path, records: ModuleType, aside: bool = True) -> EdgeClient:
    """A store of 64-d points; `aside`: written as an ingest writes, its segments indexed by
    a child process (for the client's life)."""
    client = EdgeClient(path)
    if aside:
        client.aside_block = client.indexing_aside()  # kept: its end would undo it
        client.aside_block.__enter__()
    client.create_collection(
        "docs", {DENSE: records.VectorParams(size=64, distance=records.Distance.COSINE)}
    )
    return client
