"""Knowledge stores: one Qdrant collection each, embedded on disk or on a Qdrant server.

A store's collection holds a dense vector and a BM25 sparse vector per chunk. Everything needed
to keep it in sync with its sources lives in the collection itself: the index fingerprint in
the collection's metadata, and each source's content hash in its chunks' payloads.
"""

import re
import time
import uuid
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from qdrant_client import QdrantClient, models

from tools import sparse
from tools.errors import ArchivistError, StoreMismatch, StoreNotFound

DENSE = "dense"
SPARSE = "bm25"
SCHEMA_VERSION = 1
# Fingerprint keys that decide whether stored vectors can be compared with new ones.
VECTOR_KEYS = ("embed_model", "dimension", "document_prefix", "query_prefix", "sparse")
SPARSE_SCHEME = "bm25-crc32-cjkbigram-v1"
STORE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
_ID_NAMESPACE = uuid.UUID("5b0c6f0e-3d0a-4d8e-9b7a-6a1c2f4e8d21")

SearchMode = Literal["hybrid", "dense", "sparse"]


@dataclass
class Chunk:
    """A piece of a source document, ready to embed and store."""

    text: str
    source: str
    chunk_index: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """Derive the point id from source, position and content, so re-runs overwrite."""
        return str(uuid.uuid5(_ID_NAMESPACE, f"{self.source}\0{self.chunk_index}\0{self.text}"))


@dataclass
class SearchResult:
    """One retrieved chunk, ranked."""

    rank: int
    score: float
    source: str
    chunk_id: str
    text: str
    metadata: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON shape `search --json` and `ask --json` print."""
        return {
            "rank": self.rank,
            "score": round(self.score, 4),
            "source": self.source,
            "chunk_id": self.chunk_id,
            "text": self.text,
            "metadata": self.metadata,
        }


@dataclass
class SourceInfo:
    """What a store holds of one source."""

    source: str
    doc_hash: str
    chunks: int
    expected_chunks: int
    ingested_at: float

    @property
    def complete(self) -> bool:
        """Whether every chunk of the source's current version is stored."""
        return self.chunks == self.expected_chunks


def validate_store_name(name: str) -> str:
    """Return `name` if it can name a store (and a tool), else raise with the rule."""
    if not STORE_NAME.match(name):
        raise ArchivistError(
            f"'{name}' cannot name a store.",
            "Use a letter followed by letters, digits or underscores (e.g. shop_docs): "
            "the store's tool is called search_<store>.",
        )
    return name


def connect(
    path: Path | None = None,
    url: str | None = None,
    api_key: str | None = None,
    legacy_path: Path | None = None,
):
    """Open the Qdrant behind the stores: a server when `url` is given, else Qdrant Edge at `path`.

    Stores that an earlier release kept in qdrant-client's local mode at `legacy_path` are
    copied into the embedded store the first time it opens (vectors included, no re-embedding).
    """
    if url:
        return QdrantClient(url=url, api_key=api_key)
    assert path is not None, "connect() needs a path or a url"
    from tools.edge import EdgeClient, migrate_legacy

    client = EdgeClient(path)
    if legacy_path is not None:
        migrate_legacy(legacy_path, client)
    return client


def list_stores(client: QdrantClient) -> list[str]:
    """Return the names of the stores (collections) this Qdrant holds."""
    return sorted(c.name for c in client.get_collections().collections)


def fingerprints_match(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether vectors made under `wanted` can be compared with those under `stored`."""
    return all(stored.get(key) == wanted.get(key) for key in VECTOR_KEYS)


class KnowledgeStore:
    """A named store of chunks: its collection's lifecycle, writes and queries."""

    def __init__(self, client: QdrantClient, name: str) -> None:
        self.client = client
        self.name = validate_store_name(name)

    def exists(self) -> bool:
        """Whether the store's collection exists."""
        return self.client.collection_exists(self.name)

    def info(self) -> dict[str, Any]:
        """Return the store's metadata: fingerprint, description, creation time."""
        if not self.exists():
            raise StoreNotFound(
                f"There is no store named '{self.name}'.",
                f"Create it with: archivist ingest PATH --store {self.name}",
            )
        metadata = self.client.get_collection(self.name).config.metadata or {}
        return metadata.get("archivist", {})

    @property
    def fingerprint(self) -> dict[str, Any]:
        """The index fingerprint the store was built with."""
        return self.info().get("fingerprint", {})

    @property
    def description(self) -> str:
        """What the store holds, in words, for the retrieval tool's description."""
        return self.info().get("description", "")

    def ensure(self, fingerprint: dict[str, Any], description: str | None = None) -> None:
        """Create the collection for `fingerprint`, or check an existing one matches it."""
        fingerprint = {**fingerprint, "sparse": SPARSE_SCHEME}
        if not self.exists():
            self.client.create_collection(
                self.name,
                vectors_config={
                    DENSE: models.VectorParams(
                        size=fingerprint["dimension"], distance=models.Distance.COSINE
                    )
                },
                sparse_vectors_config={
                    SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
                metadata={
                    "archivist": {
                        "schema": SCHEMA_VERSION,
                        "fingerprint": fingerprint,
                        "description": description or "",
                        "created_at": time.time(),
                    }
                },
            )
            with warnings.catch_warnings():
                # The embedded store ignores payload indexes; a server uses this one to filter.
                warnings.simplefilter("ignore", UserWarning)
                self.client.create_payload_index(
                    self.name, "source", models.PayloadSchemaType.KEYWORD
                )
            return
        self.check(fingerprint)
        if description is not None and description != self.description:
            info = {**self.info(), "description": description}
            self.client.update_collection(self.name, metadata={"archivist": info})

    def check(self, fingerprint: dict[str, Any]) -> None:
        """Refuse to mix vectors from another embedding model or prefix policy."""
        fingerprint = {**fingerprint, "sparse": SPARSE_SCHEME}
        stored = self.fingerprint
        if not fingerprints_match(stored, fingerprint):
            raise StoreMismatch(
                f"Store '{self.name}' was built with embedding model "
                f"'{stored.get('embed_model')}' ({stored.get('dimension')} dimensions), "
                f"but '{fingerprint.get('embed_model')}' ({fingerprint.get('dimension')} "
                "dimensions) is configured.",
                f"Use the same model (--embed-model {stored.get('embed_model')}), ingest into a "
                "new store, or rebuild this one with --reindex.",
            )

    def drop(self) -> None:
        """Delete the store's collection and everything in it."""
        self.client.delete_collection(self.name)

    def count(self) -> int:
        """Return the number of chunks stored."""
        return self.client.count(self.name, exact=True).count

    def upsert(
        self,
        chunks: Sequence[Chunk],
        vectors: Sequence[Sequence[float]],
        doc_hashes: Sequence[str],
        doc_chunks: Sequence[int],
    ) -> None:
        """Store chunks with their dense vectors; each records its source version."""
        now = time.time()
        points = []
        for chunk, vector, doc_hash, total in zip(
            chunks, vectors, doc_hashes, doc_chunks, strict=True
        ):
            indices, values = sparse.document_vector(chunk.text)
            points.append(
                models.PointStruct(
                    id=chunk.id,
                    vector={
                        DENSE: list(vector),
                        SPARSE: models.SparseVector(indices=indices, values=values),
                    },
                    payload={
                        "text": chunk.text,
                        "source": chunk.source,
                        "chunk_index": chunk.chunk_index,
                        "doc_hash": doc_hash,
                        "doc_chunks": total,
                        "ingested_at": now,
                        "metadata": chunk.metadata,
                    },
                )
            )
        if points:
            self.client.upsert(self.name, points=points, wait=True)

    def delete_stale(self, source: str, doc_hash: str) -> None:
        """Remove a source's chunks from versions other than `doc_hash`."""
        self.client.delete(
            self.name,
            points_selector=models.Filter(
                must=[_match("source", source)], must_not=[_match("doc_hash", doc_hash)]
            ),
            wait=True,
        )

    def delete_source(self, source: str) -> int:
        """Remove every chunk of `source`; return how many there were."""
        selector = models.Filter(must=[_match("source", source)])
        removed = self.client.count(self.name, count_filter=selector, exact=True).count
        if removed:
            self.client.delete(self.name, points_selector=selector, wait=True)
        return removed

    def sources(self) -> dict[str, SourceInfo]:
        """Return each source's newest complete version (else its newest), from the payloads."""
        versions: dict[tuple[str, str], SourceInfo] = {}
        fields = ["source", "doc_hash", "doc_chunks", "ingested_at"]
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.name, limit=2048, offset=offset, with_payload=fields, with_vectors=False
            )
            for point in points:
                p = point.payload or {}
                key = (p["source"], p["doc_hash"])
                info = versions.get(key)
                if info is None:
                    info = versions[key] = SourceInfo(*key, 0, p["doc_chunks"], 0.0)
                info.chunks += 1
                info.ingested_at = max(info.ingested_at, p["ingested_at"])
            if offset is None:
                break
        found: dict[str, SourceInfo] = {}
        for info in versions.values():
            best = found.get(info.source)
            if best is None or (info.complete, info.ingested_at) > (
                best.complete,
                best.ingested_at,
            ):
                found[info.source] = info
        return dict(sorted(found.items()))

    def search(
        self,
        query_vector: Sequence[float] | None,
        query_text: str,
        k: int = 5,
        mode: SearchMode = "hybrid",
        sources: Iterable[str] | None = None,
    ) -> list[SearchResult]:
        """Return the `k` best chunks for a query, fusing dense and BM25 ranks in hybrid mode."""
        query_filter = models.Filter(must=[_match("source", list(sources))]) if sources else None
        indices, values = sparse.query_vector(query_text)
        sparse_query = models.SparseVector(indices=indices, values=values)
        if mode == "dense":
            response = self.client.query_points(
                self.name,
                query=list(query_vector),
                using=DENSE,
                limit=k,
                query_filter=query_filter,
                with_payload=True,
            )
        elif mode == "sparse":
            response = self.client.query_points(
                self.name,
                query=sparse_query,
                using=SPARSE,
                limit=k,
                query_filter=query_filter,
                with_payload=True,
            )
        else:
            depth = max(4 * k, 20)
            response = self.client.query_points(
                self.name,
                prefetch=[
                    models.Prefetch(
                        query=list(query_vector), using=DENSE, limit=depth, filter=query_filter
                    ),
                    models.Prefetch(
                        query=sparse_query, using=SPARSE, limit=depth, filter=query_filter
                    ),
                ],
                query=models.FusionQuery(fusion=models.Fusion.RRF),
                limit=k,
                with_payload=True,
            )
        return [
            SearchResult(
                rank=rank,
                score=point.score,
                source=point.payload["source"],
                chunk_id=str(point.id),
                text=point.payload["text"],
                metadata=point.payload.get("metadata", {}),
            )
            for rank, point in enumerate(response.points, start=1)
        ]


def _match(key: str, value: str | list[str]) -> models.FieldCondition:
    match = (
        models.MatchAny(any=value) if isinstance(value, list) else models.MatchValue(value=value)
    )
    return models.FieldCondition(key=key, match=match)
