"""Knowledge stores: one Qdrant collection each, embedded on disk or on a Qdrant server.

A store's collection holds a dense vector and a BM25 sparse vector per chunk. Everything needed
to keep it in sync with its sources lives in the collection itself: the index fingerprint in
the collection's metadata, and each source's content hash in its chunks' payloads.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
import time
import uuid
import warnings
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from archivist.tools import sparse
from archivist.tools.catalog import SourceCatalog, version_key
from archivist.tools.engine import (
    Engine,
    held,
    indexing_aside,
    records,
    scroll_pages,
    turn_taking,
)
from archivist.tools.errors import ArchivistError, StoreMismatch, StoreNotFound
from archivist.tools.passage import Passage
from archivist.tools.prefixes import reads
from archivist.tools.ranking import (
    FUSION_DEPTH,
    collapse_overlaps,
    declared_names,
    diversify_sources,
    fuse_rrf,
    fuse_zscore,
    merge_duplicates,
    name_share,
    select_mmr,
    settle_ties,
)
from archivist.tools.search import DEFAULT as DEFAULT_SEARCH
from archivist.tools.search import SearchRequest
from archivist.tools.words import closest, did_you_mean

if TYPE_CHECKING:
    from qdrant_client import models

    from archivist.tools.progress import ProgressFn

DENSE = "dense"
SPARSE = "bm25"
SCHEMA_VERSION = 1
# Fingerprint keys that decide whether stored vectors can be compared with new ones.
VECTOR_KEYS = ("embed_model", "dimension", "document_prefix", "query_prefix", "sparse")
# The sparse scheme of a new store (an existing one keeps the scheme its fingerprint names).
SPARSE_SCHEME = sparse.DEFAULT_SCHEME
# How many more candidates a dense search on a store on disk draws from its int8 copy than
# it returns, before scoring them again on the vectors themselves (see `dense_params`): on
# 4,763 chunks of the benchmarks' corpus, the exact top 10 came back 98.4% whole at 2, 99.7%
# at 3, 99.9% at 4 (an int8 search alone: 85.6%). The embedded store draws TURBO_OVERSAMPLING
# times more from the 2-bit copy a store put on disk now gets (tools/edge/indexing.py).
OVERSAMPLING = 3.0
# How many candidates a dense search's HNSW walk keeps (Qdrant's `hnsw_ef`; its default is
# the graph's `ef_construct`). On the scale benchmark's hashed vectors at 99,910 chunks on
# disk, graphs built with ef_construct 256 (HNSW_EF_CONSTRUCT), against an exact search of
# the same store (300 queries): 0.950 of the exact 10 at 128 (dense p50 2.0 ms), 0.982 at
# 256 (1.9 ms), 0.988 at 384 (2.5 ms), 0.992 at 512; at 999,356 chunks (27 segments, each
# walked) 0.980 at 384 (16 ms), 0.984 at 512 (19 ms). The points missed score within ~1e-4
# of the exact 10th (docs/performance.md, "Search accuracy").
HNSW_EF = 384
STORE_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,62}$")
# Collections Archivist keeps for itself are named with a character store names cannot hold,
# so no user's store can collide with one (a store named `docs__rebuild` is the user's own).
REBUILD_SUFFIX = "-rebuild"
# The metadata mark of a rebuild that is complete: from then on it is swapped in, whatever
# the store it replaces holds, until the swap has finished and dropped it.
REBUILT = "rebuilt"
# The metadata mark of a store being copied from another Qdrant, until the copy is whole.
COPYING = "copying_from"
# Payload fields the store filters and counts by, with their index types. `doc_hash` is
# filtered by too, but always beside a source, whose index narrows the match to one
# document's chunks; the embedded engine rebuilds each index in memory whenever a store is
# opened (~13 ms a field at 22,000 chunks), so a field is indexed only where that pays.
# Stores made with a `doc_hash` index keep it.
PAYLOAD_INDEXES = {"source": "keyword", "version": "keyword"}
_ID_NAMESPACE = uuid.UUID("5b0c6f0e-3d0a-4d8e-9b7a-6a1c2f4e8d21").bytes


@dataclass
class Chunk:
    """A piece of a source document, ready to embed and store."""

    text: str
    source: str
    chunk_index: int
    metadata: dict[str, Any] = field(default_factory=dict)

    @functools.cached_property
    def index_text(self) -> str:
        """The text embedded and BM25-indexed: the chunk's own text after a line naming its
        document's title and heading path (see `indexed_text`). Made once: an ingest asks for
        it for the embedder and for the helper making the chunk's BM25 vector."""
        return indexed_text(self.text, self.metadata, first=self.chunk_index == 0)

    @property
    def id(self) -> str:
        """Derive the point id from source, position and content, so re-runs overwrite.

        As `str(uuid.uuid5(...))`, but a lone surrogate (a file name's undecodable byte, a
        JSON `\\ud800` escape) is hashed as its code point instead of failing the whole
        ingest; written out without a `uuid.UUID` in between (a third of its cost).
        """
        name = f"{self.source}\0{self.chunk_index}\0{self.text}".encode("utf-8", "surrogatepass")
        digest = bytearray(hashlib.sha1(_ID_NAMESPACE + name, usedforsecurity=False).digest())
        digest[6] = digest[6] & 0x0F | 0x50  # version 5
        digest[8] = digest[8] & 0x3F | 0x80  # RFC 4122 variant
        x = digest[:16].hex()
        return f"{x[:8]}-{x[8:12]}-{x[12:16]}-{x[16:20]}-{x[20:]}"


@dataclass(frozen=True)
class ChunkWrite:
    """One chunk to store: its vectors and the source version it belongs to."""

    chunk: Chunk
    vector: Sequence[float]
    doc_hash: str
    """The content hash of the chunk's source version."""
    doc_chunks: int
    """How many chunks that version has: it is complete when all are stored."""
    ingested_at: float | None = None
    """When the version was read (None: now)."""
    sparse: tuple[list[int], list[float]] | None = None
    """Its BM25 vector, made ahead in the store's scheme (None: made as it is stored)."""


@dataclass(frozen=True)
class ServerLayout:
    """How a Qdrant server or cluster lays out a new store's collection (unset: the server's
    defaults). The embedded store has one node and one shard, and is given none: it lays out
    its stores' vectors itself (`connect`'s `layout`)."""

    shard_number: int | None = None
    replication_factor: int | None = None
    write_consistency_factor: int | None = None
    vectors: str | None = None
    """Where the collection keeps its vectors (ARCHIVIST_STORE_LAYOUT): `auto` or `disk`, on
    disk (see `on_disk`); `memory` or None, the server's default (in memory)."""

    @property
    def on_disk(self) -> bool:
        """Whether the collection keeps its dense vectors, keyword index, graph and payloads on
        disk, searched through an int8 copy of its dense vectors kept in memory. A server
        makes that copy for each segment its optimizer rewrites, and searches a segment not
        rewritten yet on its vectors: a small collection costs nothing more, so `auto` is
        decided at creation."""
        return self.vectors in ("auto", "disk")

    def create_options(self) -> dict[str, Any]:
        """The `create_collection` arguments this layout sets (with `_collection_config`'s
        vector settings, for a layout `on_disk`)."""
        options: dict[str, Any] = {
            name: getattr(self, name)
            for name in ("shard_number", "replication_factor", "write_consistency_factor")
            if getattr(self, name) is not None
        }
        if self.on_disk:
            from qdrant_client import models

            from archivist.tools.edge.indexing import HNSW_EF_CONSTRUCT, HNSW_M, QUANTILE

            options["on_disk_payload"] = True
            options["hnsw_config"] = models.HnswConfigDiff(
                on_disk=True, m=HNSW_M, ef_construct=HNSW_EF_CONSTRUCT
            )
            options["quantization_config"] = models.ScalarQuantization(
                scalar=models.ScalarQuantizationConfig(
                    type=models.ScalarType.INT8, quantile=QUANTILE, always_ram=True
                )
            )
        return options


def dense_params(m: ModuleType) -> models.SearchParams:
    """How a dense search runs, in the records of module `m`: an indexed segment's graph is
    walked keeping HNSW_EF candidates; on a store whose vectors are on disk, its quantized
    copy finds OVERSAMPLING times the candidates asked for (the embedded store's 2-bit copy
    8 times more), which are scored again on the vectors themselves (Qdrant would return
    the copy's scores otherwise). A store in memory is searched
    on its vectors, and a segment searched exactly (a small store's) ignores both."""
    return m.SearchParams(
        hnsw_ef=HNSW_EF,
        quantization=m.QuantizationSearchParams(rescore=True, oversampling=OVERSAMPLING),
    )


def tool_name(store_name: str) -> str:
    """Name a store's retrieval tool after it."""
    return f"search_{store_name}"


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
    legacy_path: Path | None = None,
    wait: float | None = None,
    layout: str = "auto",
) -> Engine:
    """Open the Qdrant behind the stores: a server when `url` is given, else Qdrant Edge at `path`.

    With `prefer_grpc`, a server is spoken to over gRPC (port 6334) instead of REST. Stores that
    an earlier release kept in qdrant-client's local mode at `legacy_path` are copied into the
    embedded store the first time it opens (vectors included, no re-embedding). The embedded
    store is shared with other processes by taking turns; `wait` bounds the seconds spent
    waiting for one (None: no bound). `layout` says where the embedded store keeps a store's
    dense vectors (`auto`, `memory` or `disk`: see `archivist.tools.edge.indexing`); a
    server's stores are laid out by their `ServerLayout`.
    """
    if url:
        from qdrant_client import QdrantClient

        return QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, timeout=timeout)
    assert path is not None, "connect() needs a path or a url"
    from archivist.tools.edge import EdgeClient
    from archivist.tools.migrate import migrate_legacy

    client = EdgeClient(path, wait, layout=layout)
    if legacy_path is not None:
        migrate_legacy(legacy_path, client)
    return client


def copy_points(
    source: KnowledgeStore,
    target: KnowledgeStore,
    batch: int = 256,
    on_progress: ProgressFn | None = None,
) -> int:
    """Copy every point of `source` into `target` (vectors and payloads; nothing re-embedded).

    The two stores may live on different Qdrants; reports `Copied` events with the chunks
    copied so far (`Copied`); returns how many points were copied.
    """
    from archivist.tools.progress import Copied

    copied, m = 0, target.records
    for points in scroll_pages(source.client, source.name, batch, with_vectors=True):
        target.client.upsert(
            target.name,
            points=[
                m.PointStruct(id=p.id, vector=_vectors_as(m, p.vector), payload=p.payload)
                for p in points
            ],
            wait=True,
        )
        copied += len(points)
        if on_progress is not None:
            on_progress(Copied(copied))
    return copied


def list_stores(client: Engine) -> list[str]:
    """Return the names of the stores this Qdrant holds (not Archivist's scratch collections,
    nor collections whose names no store can have)."""
    names = (c.name for c in client.get_collections().collections)
    return sorted(n for n in names if STORE_NAME.match(n))


def missing_store(client: Engine, name: str, fix: str | None) -> StoreNotFound:
    """A store not found, with the stores named most like it (`--store antdd`: did you mean
    'antd'?), then `fix`."""
    likely = closest(name, list_stores(client))
    return StoreNotFound(f"There is no store named '{name}'.{did_you_mean(likely)}", fix)


def finish_swaps(client: Engine) -> list[str]:
    """Finish every rebuild-and-swap a crash cut short; return the stores swapped in."""
    names = (c.name for c in client.get_collections().collections)
    bases = (n.removesuffix(REBUILD_SUFFIX) for n in names if n.endswith(REBUILD_SUFFIX))
    return [b for b in bases if STORE_NAME.match(b) and KnowledgeStore(client, b).finish_swap()]


def fingerprints_match(stored: dict[str, Any], wanted: dict[str, Any]) -> bool:
    """Whether vectors made under `wanted` can be compared with those under `stored`."""
    return all(stored.get(key) == wanted.get(key) for key in VECTOR_KEYS)


def sparse_hint(store: str, scheme: str | None, texts: Sequence[str] | None = None) -> str | None:
    """Say how to bring a store's keyword search up to date, if its sparse scheme is not the
    one new stores get (None when it is, or when `texts`, a sample of the store's, hold no
    CJK character and the two schemes differ only on CJK text: a reindex would change
    nothing)."""
    if scheme == SPARSE_SCHEME:
        return None
    same = {scheme, SPARSE_SCHEME} <= sparse.SAME_WITHOUT_CJK
    if same and texts is not None and not sparse.holds_cjk(texts):
        return None
    if scheme in sparse.SCHEMES:
        return (
            f"Store '{store}' keeps keyword vectors of the older scheme '{scheme}'; "
            f"`archivist ingest PATH --store {store} --reindex` upgrades its keyword search."
        )
    return (
        f"Store '{store}' keeps keyword vectors of the scheme {scheme!r}, unknown to this "
        f"release: upgrade Archivist, or rebuild it with `archivist ingest PATH --store {store} "
        "--reindex`."
    )


class KnowledgeStore(SourceCatalog):
    """A named store of chunks: its collection's lifecycle, writes and queries."""

    def __init__(self, client: Engine, name: str, layout: ServerLayout | None = None) -> None:
        self.client = client
        self.name = validate_store_name(name)
        self.layout = layout or ServerLayout()
        self.records: ModuleType = records(client)
        """The request records its engine takes (see `engine.records`)."""
        self._partial: tuple[Any, list[str]] | None = None  # (store generation, versions)
        # (settings generation, sparse encoder, embedding model): see `_query_settings`
        self._query_cache: tuple[Any, sparse.SparseEncoder, str | None] | None = None

    def exists(self) -> bool:
        """Whether the store's collection exists."""
        return self.client.collection_exists(self.name)

    def expect_search(self) -> None:
        """A search of the store follows: an embedded store on disk starts reading the files
        its dense search walks while the caller embeds the question (a hint)."""
        taking = turn_taking(self.client)
        if taking is not None:
            taking.searching(self.name)

    def info(self) -> dict[str, Any]:
        """Return the store's metadata: fingerprint, description, creation time."""
        if not self.exists():
            raise missing_store(
                self.client, self.name, f"Create it with: archivist ingest PATH --store {self.name}"
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

    @property
    def sparse_scheme(self) -> str | None:
        """The sparse scheme the store's keyword vectors were made with."""
        return self.fingerprint.get("sparse")

    def sparse_encoder(self) -> sparse.SparseEncoder:
        """The encoder of the store's sparse scheme, for its queries and for chunks added to
        it: one store never mixes two vocabularies.

        Read again when the embedded store's settings may have changed (its
        `settings_generation`: another process may have rebuilt it), not after each write of
        points; a server's store is read once per `KnowledgeStore`.
        """
        return self._query_settings()[0]

    def _query_settings(self) -> tuple[sparse.SparseEncoder, str | None]:
        """The encoder of the store's sparse scheme and the name of its embedding model, read
        as `sparse_encoder` says."""
        with self._held():  # the value as of now: read with the store held
            taking = turn_taking(self.client)
            generation = taking.settings_generation if taking is not None else None
            if self._query_cache is None or self._query_cache[0] != generation:
                fingerprint = self.fingerprint
                self._query_cache = (
                    generation,
                    self._encoder_of(fingerprint),
                    fingerprint.get("embed_model"),
                )
            return self._query_cache[1], self._query_cache[2]

    def _encoder_of(self, fingerprint: dict[str, Any]) -> sparse.SparseEncoder:
        scheme = fingerprint.get("sparse")
        if scheme not in sparse.SCHEMES:
            raise StoreMismatch(
                f"Store '{self.name}' keeps keyword vectors of the scheme {scheme!r}, which this "
                f"release of Archivist cannot make (it knows {', '.join(sparse.SCHEMES)}).",
                "Upgrade Archivist to the release that built it, or rebuild the store (its "
                f"chunks are re-embedded): archivist ingest PATH --store {self.name} --reindex",
            )
        return sparse.encoder(scheme)

    def ensure(self, fingerprint: dict[str, Any], description: str | None = None) -> None:
        """Create the collection for `fingerprint`, or check an existing one matches it.

        A new store gets the sparse scheme `fingerprint` names, else SPARSE_SCHEME; an
        existing one keeps its own unless `fingerprint` names another.
        """
        self._query_cache = None
        if not self.exists():
            try:
                self._create({"sparse": SPARSE_SCHEME, **fingerprint}, description)
            except Exception:
                # Another process (a shard on another machine) created it first: check theirs.
                if not self.exists():
                    raise
            else:
                self._index_payload()
                return
        self.check(fingerprint)
        # Stores made before a field was indexed get its index now.
        self._index_payload(self.client.get_collection(self.name).payload_schema or {})
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
            **self._collection_config(fingerprint),
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

    def _collection_config(self, fingerprint: dict[str, Any]) -> dict[str, Any]:
        """The vector configuration of a collection for `fingerprint` (on a server whose
        layout is `on_disk`, the vectors and keyword index on disk)."""
        m = self.records
        # Only a server's layout puts them on disk (Archivist's own records, which the
        # embedded store takes, have no such fields).
        dense: dict[str, Any] = {}
        sparse_index: dict[str, Any] = {}
        if self.layout.on_disk:
            dense["on_disk"] = True
            sparse_index["index"] = m.SparseIndexParams(on_disk=True)
        return {
            "vectors_config": {
                DENSE: m.VectorParams(
                    size=fingerprint["dimension"], distance=m.Distance.COSINE, **dense
                )
            },
            "sparse_vectors_config": {
                SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF, **sparse_index)
            },
        }

    def _index_payload(self, indexed: Iterable[str] = ()) -> None:
        """Index the payload fields the store filters and counts by (those not in `indexed`)."""
        with warnings.catch_warnings():
            # qdrant-client's local mode ignores payload indexes (and says so).
            warnings.simplefilter("ignore", UserWarning)
            for field_name, schema in PAYLOAD_INDEXES.items():
                if field_name not in indexed:
                    kind = self.records.PayloadSchemaType(schema)
                    self.client.create_payload_index(self.name, field_name, kind, wait=True)

    def check(self, fingerprint: dict[str, Any]) -> None:
        """Refuse a store whose copy was cut short, keyword vectors of a scheme this release
        cannot make (or not the one `fingerprint` names), and vectors from another embedding
        model or prefix policy."""
        info = self.info()
        if info.get(COPYING):
            raise ArchivistError(
                f"Store '{self.name}' is an unfinished copy of {info[COPYING]}: it holds only "
                "part of its chunks.",
                "Run the same `archivist migrate` command again to finish the copy, or delete "
                f"it: archivist delete --store {self.name} --yes",
            )
        stored = info.get("fingerprint", {})
        self._encoder_of(stored)
        # Any scheme this release knows is read as it is, unless the caller wants one.
        fingerprint = {"sparse": stored.get("sparse"), **fingerprint}
        if fingerprints_match(stored, fingerprint):
            return
        model = stored.get("embed_model")
        if stored.get("sparse") != fingerprint["sparse"] and fingerprints_match(
            {**stored, "sparse": None}, {**fingerprint, "sparse": None}
        ):
            raise StoreMismatch(
                f"Store '{self.name}' keeps keyword vectors of the scheme "
                f"'{stored.get('sparse')}', not '{fingerprint['sparse']}'.",
                f"Rebuild it (nothing else changes): archivist ingest PATH --store {self.name} "
                "--reindex",
            )
        if model == fingerprint.get("embed_model"):
            raise StoreMismatch(
                f"Store '{self.name}' was built with '{model}' under other task prefixes "
                f"(document {stored.get('document_prefix')!r}, query "
                f"{stored.get('query_prefix')!r}).",
                f"Rebuild it: archivist ingest PATH --store {self.name} --reindex",
            )
        # The other model's dimension is unknown until it embeds something: not stated.
        raise StoreMismatch(
            f"Store '{self.name}' was built with embedding model '{model}' "
            f"({stored.get('dimension')} dimensions), but '{fingerprint.get('embed_model')}' is "
            "configured.",
            f"Ingest with the store's model (--embed-model {model}, or ARCHIVIST_EMBED_MODEL), "
            "ingest into a new store, or rebuild this one with --reindex.",
        )

    def drop(self) -> None:
        """Delete the store's collection and everything in it."""
        self._query_cache = None
        self.client.delete_collection(self.name)

    def rebuild_store(self) -> KnowledgeStore:
        """Return the scratch store a rebuild of this one is written to before the swap."""
        scratch = copy.copy(self)
        scratch.name = self.name + REBUILD_SUFFIX  # not a store name: no user store has it
        scratch._partial = scratch._query_cache = None
        return scratch

    def replace_with(self, other: KnowledgeStore, batch: int = 256) -> None:
        """Make this store a copy of `other` (vectors included, nothing re-embedded), then
        drop `other`. Qdrant cannot rename a collection, so the points are copied.

        Safe to interrupt at any step: `other` is marked complete first and dropped only once
        this store holds all of it, so `finish_swap` (run by every command that opens the
        store) redoes a swap a crash cut short, from the complete rebuild.
        """
        info = other.info()
        if not info.get(REBUILT):
            other.client.update_collection(
                other.name, metadata={"archivist": {**info, REBUILT: True}}
            )
        if self.exists():
            self.drop()
        self.client.create_collection(
            self.name,
            **self._collection_config(info["fingerprint"]),
            metadata={"archivist": {k: v for k, v in info.items() if k != REBUILT}},
            **self.layout.create_options(),
        )
        self._index_payload()
        copy_points(other, self, batch)
        other.drop()
        self._query_cache = None

    def finish_swap(self) -> bool:
        """Swap in a rebuild that was complete when a swap was cut short; return whether one
        was. A rebuild still being written (not marked complete) is left to its ingest."""
        rebuild = self.rebuild_store()
        if not rebuild.exists() or not rebuild.info().get(REBUILT):
            return False
        self.replace_with(rebuild)
        return True

    def count(self) -> int:
        """Return the number of chunks stored."""
        return self.client.count(self.name, exact=True).count

    def upsert(self, writes: Sequence[ChunkWrite]) -> None:
        """Store chunks with their dense vectors; each records its source version (and, in
        `version`, all of it in one indexed value that `sources` counts). Sparse vectors
        made ahead (of the store's `sparse_scheme`) are taken as given; those missing (None)
        are made here."""
        # Held through: the vectors are made in the scheme the store has when it is written.
        with self._held(), self._sized(write.vector for write in writes):
            self._upsert(writes)

    def _upsert(self, writes: Sequence[ChunkWrite]) -> None:
        # The store's encoder is looked up only for a write with a vector left to make: the
        # helper process makes nearly all of an ingest's ahead.
        encode = None if all(w.sparse for w in writes) else self.sparse_encoder().document
        m = self.records
        now = time.time()
        points = []
        versions: dict[tuple[str, str, int, float], str] = {}  # chunks share a few
        # Built without validation (the fields are ours and well-typed): checking each of a
        # point's 768 floats through pydantic costs more than the engine's whole upsert.
        for write in writes:
            chunk, vector, doc_hash, total = (
                write.chunk,
                write.vector,
                write.doc_hash,
                write.doc_chunks,
            )
            at = now if write.ingested_at is None else write.ingested_at
            indices, values = write.sparse or encode(chunk.index_text)
            version = versions.get((chunk.source, doc_hash, total, at))
            if version is None:
                version = versions[chunk.source, doc_hash, total, at] = version_key(
                    chunk.source, doc_hash, total, at
                )
            points.append(
                m.PointStruct.model_construct(
                    id=chunk.id,
                    vector={
                        DENSE: vector if isinstance(vector, list) else [float(x) for x in vector],
                        SPARSE: m.SparseVector.model_construct(indices=indices, values=values),
                    },
                    payload={
                        "text": chunk.text,
                        "source": chunk.source,
                        "chunk_index": chunk.chunk_index,
                        "doc_hash": doc_hash,
                        "doc_chunks": total,
                        "ingested_at": at,
                        "version": version,
                        "metadata": chunk.metadata,
                    },
                )
            )
        if points:
            self.client.upsert(self.name, points=points, wait=True)

    def annotate(self, **fields: Any) -> None:
        """Record `fields` in the store's metadata, beside its fingerprint and description."""
        info = self.info()
        self.client.update_collection(self.name, metadata={"archivist": {**info, **fields}})

    def disk_bytes(self) -> int | None:
        """Return the disk space the store's files take in an embedded store (None on a
        server): blocks allocated, since the engine's files are sparse, larger than they hold."""
        taking = turn_taking(self.client)
        if taking is None:
            return None
        files = (f.stat() for f in (Path(taking.path) / self.name).rglob("*") if f.is_file())
        return sum(stat.st_blocks * 512 for stat in files)

    def search(
        self,
        query_vector: Sequence[float] | None,
        query_text: str,
        request: SearchRequest = DEFAULT_SEARCH,
        sources: Iterable[str] | None = None,
    ) -> list[Passage]:
        """Return the best passages for a query: `request.fetched` of them (its `k`, or the
        candidates its reranker scores), among `sources` when given (the names its `source`
        refers to, which the caller finds with `match_sources` to word a miss its own way).

        `hybrid` fuses the dense and BM25 rankings (see `fuse_zscore`: with `fusion="zscore"`
        dense counts by its margin and its agreement with BM25, and not at all when the store's
        embedding model does not read the query's language; `"margin"`, by its margin alone
        whatever the query, as earlier releases fused; `"rrf"`, by
        reciprocal rank); overlapping chunks of one passage collapse into one result;
        `min_score` drops results scoring below it (in the mode's own score); `mmr` (0–1,
        1 = relevance only) re-ranks for diversity; `diversify` puts each source's best
        passage before any source's second (see `diversify_sources`).
        """
        with self._held(), self._sized([] if query_vector is None else [query_vector]):
            return self._search(query_vector, query_text, request, sources)

    @contextmanager
    def _sized(self, vectors: Iterable[Sequence[float]]) -> Iterator[None]:
        """When the engine refuses the block's vectors, say so with the store's fingerprint if
        their length is not the store's (the engine says only "Vector dimension error");
        checked only then, so a search or write that succeeds costs nothing more."""
        try:
            yield
        except Exception:
            for length in {len(vector) for vector in vectors}:
                self.check_dimension(length)
            raise

    def check_dimension(self, length: int) -> None:
        """Refuse vectors of another length than the store's, naming the model and the fix."""
        stored = self.fingerprint
        dimension, model = stored.get("dimension"), stored.get("embed_model")
        if dimension is None or dimension == length:
            return
        raise StoreMismatch(
            f"Store '{self.name}' holds {dimension}-dimension vectors made by '{model}', but "
            f"the embedding model gives {length}-dimension ones: what runs as '{model}' now is "
            "not the model the store was built with.",
            f"Pull the store's model again (`ollama pull {model}`); to use the model now "
            f"served, ingest into a new store (or `archivist delete --store {self.name}` and "
            "ingest again).",
        )

    def _match(self, key: str, value: str | list[str]) -> models.FieldCondition:
        m = self.records
        match = m.MatchAny(any=value) if isinstance(value, list) else m.MatchValue(value=value)
        return m.FieldCondition(key=key, match=match)

    def indexing_aside(self) -> AbstractContextManager[Any]:
        """Through the block, the embedded store indexes a segment due while it is written in
        a child process, so this process's other threads go on (an ingest's embedding
        requests); a server indexes on its own anyway."""
        return indexing_aside(self.client)

    def compact_aside(self) -> bool:
        """Inside `indexing_aside`, for a writer that will write little more: the embedded
        store compacts what it holds now in a child process, if its close would, so that the
        close need not (a server compacts on its own). Return whether it started."""
        taking = turn_taking(self.client)
        return taking.compact_aside(self.name) if taking is not None else False

    def _held(self) -> AbstractContextManager[Any]:
        """Keep the embedded store through a block (no writes in between); a server: no-op.
        (See `TurnTakingEngine`.)"""
        return held(self.client)

    def _search(
        self,
        query_vector: Sequence[float] | None,
        query_text: str,
        request: SearchRequest,
        sources: Iterable[str] | None,
    ) -> list[Passage]:
        k, mode, mmr = request.fetched, request.mode, request.mmr
        partial = self.partial_versions()
        m = self.records
        query_filter = None
        if sources or partial:
            query_filter = m.Filter(
                must=[self._match("source", list(sources))] if sources else None,
                must_not=[self._match("version", partial)] if partial else None,
            )
        depth = max(FUSION_DEPTH, 4 * k)
        with_vectors = [DENSE] if mmr is not None else False
        payload = ["text", "source", "metadata", "doc_hash"]
        requests = []
        if mode in ("dense", "hybrid"):
            requests.append(
                m.QueryRequest(
                    query=list(query_vector),
                    using=DENSE,
                    limit=depth + 1,
                    filter=query_filter,
                    with_payload=payload,
                    with_vector=with_vectors,
                    params=dense_params(m),
                )
            )
        model = None
        if mode in ("sparse", "hybrid"):
            encoder, model = self._query_settings()
            indices, values = encoder.query(query_text)
            if indices:
                requests.append(
                    m.QueryRequest(
                        query=m.SparseVector(indices=indices, values=values),
                        using=SPARSE,
                        limit=depth + 1,
                        filter=query_filter,
                        with_payload=payload,
                        with_vector=with_vectors,
                    )
                )
            elif mode == "sparse":
                return []
        # One round trip for both rankings, fused here: the same code on the embedded store
        # and on a server, whatever fusion the server version offers.
        responses = self.client.query_batch_points(self.name, requests=requests)
        lists = [
            settle_ties(self.client, self.name, request, response.points, depth)
            for request, response in zip(requests, responses, strict=True)
        ]
        if mode != "hybrid" or len(lists) == 1:
            candidates = [(p, p.score) for p in lists[0]]
        elif request.fusion == "rrf":
            candidates = fuse_rrf(lists[0], lists[1])
        else:
            # A model that cannot read the query's language has no say (see `dense_weight`);
            # `margin` fuses as earlier releases did, by the margin alone whatever the query.
            if request.fusion == "margin":
                candidates = fuse_zscore(lists[0], lists[1], agreement=False)
            else:
                candidates = fuse_zscore(
                    lists[0],
                    lists[1],
                    reads=reads(model, query_text),
                    named=name_share(set(indices), functools.partial(_name_terms, encoder)),
                )
        if request.min_score is not None:
            candidates = [(p, s) for p, s in candidates if s >= request.min_score]
        passages = merge_duplicates(collapse_overlaps(candidates, DENSE))
        if mmr is not None:
            passages = select_mmr(passages, query_vector, len(passages), mmr)
        if request.diversify:
            passages = diversify_sources(passages, k)
        return [
            Passage(
                rank=rank,
                score=passage.score,
                source=passage.source,
                chunk_id=passage.chunk_id,
                text=passage.text,
                metadata=passage.metadata,
            )
            for rank, passage in enumerate(passages[:k], start=1)
        ]


# The most characters of title and headings put before a chunk's text for indexing.
MAX_HEADING_LINE = 200
MAX_DESCRIPTION = 300
_OPENING_HEADING = re.compile(r"#{1,6}[ \t]+([^\n]+)")


def indexed_text(text: str, metadata: dict[str, Any], first: bool = False) -> str:
    """The text a chunk is embedded and BM25-indexed by: its document's title (and subtitle,
    the other name front matter gives a page: `Button · 按钮`) and heading path on a line of
    their own, the columns of the table it continues, then the chunk's text; a document's
    `first` chunk also gets its front-matter description. A chunk in the middle of a section
    does not repeat the words its page and section are titled with; with them, a search for
    those words finds it. The stored `text` (and its offsets) stay the chunk's own."""
    names = declared_names(metadata)
    parts = [" · ".join(dict.fromkeys(names))] if names else []
    headings = [h.strip() for h in metadata.get("headings") or [] if isinstance(h, str)]
    parts += [h for h in headings if h and h not in parts and h not in names]
    # A chunk that opens with its own heading says that much itself.
    opening = _OPENING_HEADING.match(text)
    if parts and opening and opening.group(1).startswith(parts[-1]):
        parts.pop()
    lines = [" › ".join(parts)[:MAX_HEADING_LINE]] if parts else []
    description = metadata.get("description")
    if first and isinstance(description, str) and description.strip():
        lines.append(" ".join(description.split())[:MAX_DESCRIPTION])
    columns = metadata.get("table_columns")
    if isinstance(columns, str) and columns.strip():
        lines.append(columns.strip()[:MAX_HEADING_LINE])
    if not lines:
        return text
    return "\n".join(lines) + "\n\n" + text


@functools.lru_cache(maxsize=4096)
def _name_terms(encoder: sparse.SparseEncoder, name: str) -> frozenset[int]:
    """A page name's keyword terms under a store's sparse scheme (see `name_share`): a store
    holds few names and a search looks up some twenty, so each is encoded once."""
    return frozenset(encoder.query(name)[0])


def _vectors_as(m: ModuleType, vector: Any) -> Any:
    """A point's vectors as the records of module `m` (a copy between two engines)."""
    if isinstance(vector, dict):
        return {name: _vectors_as(m, v) for name, v in vector.items()}
    if hasattr(vector, "indices"):
        return m.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return vector
