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
from tools.errors import ArchivistError, StoreLocked, StoreMismatch, StoreNotFound

DENSE = "dense"
SPARSE = "bm25"
SCHEMA_VERSION = 1
# Fingerprint keys that decide whether stored vectors can be compared with new ones.
VECTOR_KEYS = ("embed_model", "dimension", "document_prefix", "query_prefix", "sparse")
SPARSE_SCHEME = "bm25-crc32-cjkbigram-v1"
STORE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
# Payload fields the store filters by; a server indexes them (the embedded store scans).
PAYLOAD_INDEXES = {
    "source": models.PayloadSchemaType.KEYWORD,
    "doc_hash": models.PayloadSchemaType.KEYWORD,
}
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


@dataclass(frozen=True)
class ServerLayout:
    """How a Qdrant server or cluster lays out a new store's collection (unset: the server's
    defaults). The embedded store has one node and one shard, and is given none."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None

    def create_options(self) -> dict[str, int]:
        """The `create_collection` arguments this layout sets."""
        return {k: v for k, v in vars(self).items() if v is not None}


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
    prefer_grpc: bool = False,
    timeout: int | None = None,
):
    """Open the Qdrant behind the stores: a server when `url` is given, else the local path.

    With `prefer_grpc`, a server is spoken to over gRPC (port 6334) instead of REST.
    """
    if url:
        return QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, timeout=timeout)
    assert path is not None, "connect() needs a path or a url"
    path.mkdir(parents=True, exist_ok=True)
    try:
        return QdrantClient(path=str(path))
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreLocked(
                f"The embedded store at {path} is in use by another Archivist process.",
                "Wait for it to finish, or run a Qdrant server and set QDRANT_URL so several "
                "processes can share the stores.",
            ) from None
        raise


REBUILD_SUFFIX = "__rebuild"


def list_stores(client: QdrantClient) -> list[str]:
    """Return the names of the stores (collections) this Qdrant holds, without rebuilds."""
    names = (c.name for c in client.get_collections().collections)
    return sorted(n for n in names if not n.endswith(REBUILD_SUFFIX))


def fingerprints_match(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether vectors made under `wanted` can be compared with those under `stored`."""
    return all(stored.get(key) == wanted.get(key) for key in VECTOR_KEYS)


class KnowledgeStore:
    """A named store of chunks: its collection's lifecycle, writes and queries."""

    def __init__(self, client: QdrantClient, name: str, layout: ServerLayout | None = None) -> None:
        self.client = client
        self.name = validate_store_name(name)
        self.layout = layout or ServerLayout()

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
            try:
                self._create(fingerprint, description)
            except Exception:
                # Another process (a shard on another machine) created it first: check theirs.
                if not self.exists():
                    raise
            else:
                self._index_payload()
                return
        self.check(fingerprint)
        info = self.info()
        # Settings outside VECTOR_KEYS (the splitter's) are recorded as they are now.
        updated = {
            **info,
            "fingerprint": {**info.get("fingerprint", {}), **fingerprint},
            "description": info.get("description", "") if description is None else description,
        }
        if updated != info:
            self.client.update_collection(self.name, metadata={"archivist": updated})

    def _create(self, fingerprint: dict[str, Any], description: str | None) -> None:
        self.client.create_collection(
            self.name,
            vectors_config={
                DENSE: models.VectorParams(
                    size=fingerprint["dimension"], distance=models.Distance.COSINE
                )
            },
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            metadata={
                "archivist": {
                    "schema": SCHEMA_VERSION,
                    "fingerprint": fingerprint,
                    "description": description or "",
                    "created_at": time.time(),
                }
            },
            **self.layout.create_options(),
        )

    def _index_payload(self) -> None:
        with warnings.catch_warnings():
            # The embedded store ignores payload indexes; a server uses them to filter.
            warnings.simplefilter("ignore", UserWarning)
            for field_name, schema in PAYLOAD_INDEXES.items():
                self.client.create_payload_index(self.name, field_name, schema, wait=True)

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

    def rebuild_store(self) -> "KnowledgeStore":
        """Return the scratch store a rebuild of this one is written to before the swap."""
        name = self.name[: 63 - len(REBUILD_SUFFIX)] + REBUILD_SUFFIX
        return KnowledgeStore(self.client, name, self.layout)

    def replace_with(self, other: "KnowledgeStore", batch: int = 256) -> None:
        """Make this store a copy of `other` (vectors included, nothing re-embedded), then
        drop `other`. Qdrant cannot rename a collection, so the points are copied."""
        info = other.info()
        if self.exists():
            self.drop()
        self.ensure(info["fingerprint"], info.get("description", ""))
        offset = None
        while True:
            points, offset = self.client.scroll(
                other.name, limit=batch, offset=offset, with_payload=True, with_vectors=True
            )
            if points:
                self.client.upsert(
                    self.name,
                    points=[
                        models.PointStruct(id=p.id, vector=p.vector, payload=p.payload)
                        for p in points
                    ],
                    wait=True,
                )
            if offset is None:
                break
        other.drop()

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

    def chunks(self, sources: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Return the stored chunks (of `sources`, else all) as flat records for a table,
        ordered by source and position: source, chunk_index, heading, start, end, size, text."""
        selector = models.Filter(must=[_match("source", list(sources))]) if sources else None
        records = []
        offset = None
        while True:
            points, offset = self.client.scroll(
                self.name,
                scroll_filter=selector,
                limit=1024,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            for point in points:
                p = point.payload or {}
                metadata = p.get("metadata", {})
                records.append(
                    {
                        "source": p["source"],
                        "chunk_index": p["chunk_index"],
                        "heading": heading_path(metadata),
                        "start": metadata.get("start"),
                        "end": metadata.get("end"),
                        "size": len(p["text"]),
                        "text": p["text"],
                    }
                )
            if offset is None:
                break
        return sorted(records, key=lambda r: (r["source"], r["chunk_index"]))

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


def heading_path(metadata: dict[str, Any]) -> str:
    """Join a chunk's heading path for display: `Refund Policy › Refund window`."""
    return " › ".join(metadata.get("headings") or [])


def _match(key: str, value: str | list[str]) -> models.FieldCondition:
    match = (
        models.MatchAny(any=value) if isinstance(value, list) else models.MatchValue(value=value)
    )
    return models.FieldCondition(key=key, match=match)
