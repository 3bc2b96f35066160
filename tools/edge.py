"""Qdrant Edge (Qdrant's in-process engine) behind the part of `QdrantClient` the stores use.

`EdgeClient` takes and returns `qdrant_client.models` objects, so `KnowledgeStore` codes
against one interface whether its collections live in this process or on a Qdrant server.
Each collection is one Edge shard in `<root>/<name>/shard`; what Edge does not keep (the
collection's vector configuration, its metadata and payload indexes) is in
`<root>/<name>/collection.json`, replaced atomically. A collection exists once that file does.

Edge lets one process at a time open a shard, so the processes sharing `<root>` take turns
through a `Lease` (archivist.tools.lease): a client opens its shards when an operation needs
them and closes them when another process asks for the store, between two operations. A
process that writes also holds `<root>`'s writer lock for its whole run (`writing`).

Small shards are searched exactly (~5 ms at 33,000 768-d chunks on 2 cores); a larger one
gets HNSW indexes one segment at a time as it grows, and its last part when the client
closes (see INDEXING_THRESHOLD_KB).
"""

import atexit
import functools
import json
import os
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

import qdrant_edge as qe
from qdrant_client import QdrantClient, models
from qdrant_client.http.models import QueryResponse

from archivist.tools.errors import StoreLocked
from archivist.tools.lease import Lease, WriterLock, stderr_notice

COLLECTION_FILE = "collection.json"
SHARD_DIR = "shard"
GENERATION_FILE = "generation"
MIGRATING_FILE = "migrating"
FORMAT = 1
# Qdrant's default RRF constant; the server and qdrant-client's local mode use it too.
RRF_K = 2
# Dense vectors are stored as float16: half the memory and disk of float32, and scores within
# ~1e-3 of float32's (Ollama's nomic-embed-text itself runs with float16 weights).
#
# Unindexed vectors (KB, counted as float32) a store may hold before they get an HNSW index:
# about 33,000 768-d vectors, which an exact search scans in ~5 ms on 2 cores. Building the
# index costs ~0.6 ms a vector there, so stores below this size never pay for it.
INDEXING_THRESHOLD_KB = 100_000
# A larger store is indexed as it grows, one segment of about that size at a time: building
# one index for 100,000 chunks at the end held ~2.3 GB (Edge maps the old segment and writes
# the new one); segment by segment the peak stays near the store's own size. Segments are
# never merged past SEGMENT_KB (a merge would index everything again), and the store's last,
# smaller part is indexed when it closes if it holds at least TAIL_INDEX_KB.
SEGMENT_KB = 110_000
TAIL_INDEX_KB = 20_000
# Points written between checks of how much of a shard is unindexed.
INDEX_CHECK_POINTS = 2_000
# Seconds between flushes of a shard's segments (a Qdrant server's flush_interval_sec).
FLUSH_INTERVAL = 5.0

_DISTANCES = {
    models.Distance.COSINE: qe.Distance.Cosine,
    models.Distance.EUCLID: qe.Distance.Euclid,
    models.Distance.DOT: qe.Distance.Dot,
    models.Distance.MANHATTAN: qe.Distance.Manhattan,
}
_SCHEMAS = {
    models.PayloadSchemaType.KEYWORD: qe.PayloadSchemaType.Keyword,
    models.PayloadSchemaType.INTEGER: qe.PayloadSchemaType.Integer,
    models.PayloadSchemaType.FLOAT: qe.PayloadSchemaType.Float,
    models.PayloadSchemaType.BOOL: qe.PayloadSchemaType.Bool,
    models.PayloadSchemaType.TEXT: qe.PayloadSchemaType.Text,
    models.PayloadSchemaType.DATETIME: qe.PayloadSchemaType.Datetime,
    models.PayloadSchemaType.UUID: qe.PayloadSchemaType.Uuid,
}


def _held(method):
    """Run a method with the store's lease held (taken first if another process has it)."""

    @functools.wraps(method)
    def run(self: "EdgeClient", *args: Any, **kwargs: Any) -> Any:
        with self.hold():
            return method(self, *args, **kwargs)

    return run


class EdgeClient:
    """Collections as Qdrant Edge shards under one folder, with `QdrantClient`'s method names.

    `wait`: seconds to wait for another process using the store (None: as long as it takes);
    `notify` is told, once a wait lasts, who is being waited for.
    """

    def __init__(
        self,
        path: Path | str,
        wait: float | None = None,
        notify: Callable[[str], None] = stderr_notice,
    ) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lease = Lease(self.path, self._give_up, wait, notify)
        self._writer = WriterLock(self.path, wait, notify)
        self._generation = 0  # the store's, as read when the lease was last taken
        self._bumped = False  # whether this lease's writes have moved the generation on yet
        self._local_writes = 0
        self._depth = 0  # operations under way (nested), during which the store is kept
        self._shards: dict[str, qe.EdgeShard] = {}
        self._written: set[str] = set()
        self._flushed: dict[str, float] = {}
        self._unchecked: dict[str, int] = {}  # points written since the last index check
        self._closed = False
        # The CLI never closes explicitly; flushing and indexing must still happen at exit.
        atexit.register(self.close)

    # -- turns at the store ------------------------------------------------------------------

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Keep the store through the block: no other process writes between its operations."""
        with self._lease.mutex:
            self._check_open()
            if not self._depth:
                self._lease.yield_if_asked()
            if not self._lease.held:
                self._lease.acquire()
                self._generation = _read_generation(self.path)
                self._bumped = False
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    def writing(self) -> AbstractContextManager[None]:
        """Be the store's one writer through the block; another writer waits until it ends."""
        return self._writer.held()

    @property
    def generation(self) -> tuple[int, int]:
        """A value that changes whenever the stored points may have; read it inside `hold`."""
        return self._generation, self._local_writes

    def _changed(self) -> None:
        """Record a write: the first one of a lease moves the store's generation on."""
        self._local_writes += 1
        if not self._bumped:
            self._generation += 1
            _write_atomic(self.path / GENERATION_FILE, str(self._generation))
            self._bumped = True

    def _give_up(self) -> None:
        """Close the shards, flushed, so that another process can open them."""
        try:
            for shard in self._shards.values():
                shard.flush()
                shard.close()
        finally:
            self._shards.clear()

    # -- collections -------------------------------------------------------------------------

    def collection_exists(self, collection_name: str) -> bool:
        return self._config_file(collection_name).is_file()

    def get_collections(self) -> models.CollectionsResponse:
        names = sorted(p.parent.name for p in self.path.glob(f"*/{COLLECTION_FILE}"))
        return models.CollectionsResponse(
            collections=[models.CollectionDescription(name=n) for n in names]
        )

    @_held
    def get_collection(self, collection_name: str) -> models.CollectionInfo:
        config = self._read_config(collection_name)
        info = self._shard(collection_name).info()
        return models.CollectionInfo(
            status=models.CollectionStatus.GREEN,
            optimizer_status=models.OptimizersStatusOneOf.OK,
            indexed_vectors_count=info.indexed_vectors_count,
            points_count=info.points_count,
            segments_count=info.segments_count,
            payload_schema={
                key: models.PayloadIndexInfo(data_type=schema, points=0)
                for key, schema in config["payload_schema"].items()
            },
            config=models.CollectionConfig(
                params=models.CollectionParams(
                    vectors={
                        name: models.VectorParams(**params)
                        for name, params in config["vectors"].items()
                    },
                    sparse_vectors={
                        name: models.SparseVectorParams(**params)
                        for name, params in config["sparse_vectors"].items()
                    },
                ),
                hnsw_config=models.HnswConfig(m=16, ef_construct=100, full_scan_threshold=10000),
                optimizer_config=models.OptimizersConfig(
                    deleted_threshold=0.2,
                    vacuum_min_vector_number=1000,
                    default_segment_number=0,
                    indexing_threshold=INDEXING_THRESHOLD_KB,
                    flush_interval_sec=0,
                ),
                metadata=config["metadata"],
            ),
        )

    @_held
    def create_collection(
        self,
        collection_name: str,
        vectors_config: models.VectorParams | Mapping[str, models.VectorParams] | None = None,
        sparse_vectors_config: Mapping[str, models.SparseVectorParams] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        self._check_open()
        if self.collection_exists(collection_name):
            raise ValueError(f"Collection {collection_name} already exists")
        if isinstance(vectors_config, models.VectorParams):
            vectors_config = {"": vectors_config}
        vectors = dict(vectors_config or {})
        sparse_vectors = dict(sparse_vectors_config or {})
        folder = self.path / collection_name
        # A folder without its collection file is what an interrupted create or drop leaves.
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        self._shards[collection_name] = qe.EdgeShard.create(
            str(folder / SHARD_DIR), _edge_config(vectors, sparse_vectors)
        )
        self._changed()
        self._write_config(
            collection_name,
            {
                "format": FORMAT,
                "vectors": {n: p.model_dump(mode="json") for n, p in vectors.items()},
                "sparse_vectors": {n: p.model_dump(mode="json") for n, p in sparse_vectors.items()},
                "metadata": _jsonable(metadata),
                "payload_schema": {},
                # Indexed segment by segment as it grows (stores made before: at close).
                "segment_indexing": True,
                # Dense vectors are stored as float16 (stores made before: float32).
                "vector_datatype": "float16",
            },
        )
        return True

    @_held
    def update_collection(
        self, collection_name: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        config = self._read_config(collection_name)
        if metadata is not None:
            # Like Qdrant, new metadata keys are merged into the existing ones.
            config["metadata"] = {**(config["metadata"] or {}), **_jsonable(metadata)}
            self._write_config(collection_name, config)
        return True

    @_held
    def create_payload_index(
        self,
        collection_name: str,
        field_name: str,
        field_schema: models.PayloadSchemaType,
        wait: bool = True,
    ) -> models.UpdateResult:
        config = self._read_config(collection_name)
        schema = models.PayloadSchemaType(field_schema)
        self._shard(collection_name).update(
            qe.UpdateOperation.create_field_index(field_name, _SCHEMAS[schema])
        )
        config["payload_schema"][field_name] = schema.value
        self._write_config(collection_name, config)
        return _completed()

    @_held
    def delete_collection(self, collection_name: str) -> bool:
        self._check_open()
        if not self.collection_exists(collection_name):
            return False
        shard = self._shards.pop(collection_name, None)
        if shard is not None:
            shard.close()
        self._written.discard(collection_name)
        self._flushed.pop(collection_name, None)
        self._config_file(collection_name).unlink()
        shutil.rmtree(self.path / collection_name, ignore_errors=True)
        self._changed()
        return True

    # -- points ------------------------------------------------------------------------------

    @_held
    def count(
        self,
        collection_name: str,
        count_filter: models.Filter | None = None,
        exact: bool = True,
    ) -> models.CountResult:
        request = qe.CountRequest(exact=exact, filter=_filter(count_filter))
        return models.CountResult(count=self._shard(collection_name).count(request))

    @_held
    def upsert(
        self, collection_name: str, points: Sequence[models.PointStruct], wait: bool = True
    ) -> models.UpdateResult:
        if not isinstance(points, Sequence):
            raise NotImplementedError("EdgeClient.upsert takes a list of PointStruct.")
        edge_points = [
            qe.Point(_point_id(p.id), _vectors_to_edge(p.vector), p.payload) for p in points
        ]
        self._write(collection_name, qe.UpdateOperation.upsert_points(edge_points), wait)
        unchecked = self._unchecked.get(collection_name, 0) + len(edge_points)
        self._unchecked[collection_name] = unchecked
        if unchecked >= INDEX_CHECK_POINTS:
            self._unchecked[collection_name] = 0
            config = self._read_config(collection_name)
            if config.get("segment_indexing"):
                _build_index(collection_name, self._shards[collection_name], config)
        return _completed()

    @_held
    def delete(
        self,
        collection_name: str,
        points_selector: models.Filter | models.FilterSelector | models.PointIdsList | list,
        wait: bool = True,
    ) -> models.UpdateResult:
        if isinstance(points_selector, models.FilterSelector):
            points_selector = points_selector.filter
        if isinstance(points_selector, models.Filter):
            operation = qe.UpdateOperation.delete_points_by_filter(_filter(points_selector))
        else:
            ids = (
                points_selector.points
                if isinstance(points_selector, models.PointIdsList)
                else points_selector
            )
            operation = qe.UpdateOperation.delete_points([_point_id(i) for i in ids])
        self._write(collection_name, operation, wait)
        return _completed()

    @_held
    def scroll(
        self,
        collection_name: str,
        scroll_filter: models.Filter | None = None,
        limit: int = 10,
        offset: models.ExtendedPointId | None = None,
        with_payload: bool | Sequence[str] | models.PayloadSelector = True,
        with_vectors: bool | Sequence[str] = False,
    ) -> tuple[list[models.Record], models.ExtendedPointId | None]:
        request = qe.ScrollRequest(
            offset=None if offset is None else _point_id(offset),
            limit=limit,
            filter=_filter(scroll_filter),
            with_payload=_with_payload(with_payload),
            with_vector=_with_vectors(with_vectors),
        )
        records, next_offset = self._shard(collection_name).scroll(request)
        return (
            [
                models.Record(
                    id=_id_out(r.id), payload=r.payload, vector=_vectors_from_edge(r.vector)
                )
                for r in records
            ],
            None if next_offset is None else _id_out(next_offset),
        )

    @_held
    def query_points(
        self,
        collection_name: str,
        query: Any = None,
        using: str | None = None,
        prefetch: models.Prefetch | Sequence[models.Prefetch] | None = None,
        query_filter: models.Filter | None = None,
        limit: int = 10,
        offset: int | None = None,
        with_payload: bool | Sequence[str] | models.PayloadSelector = True,
        with_vectors: bool | Sequence[str] = False,
        score_threshold: float | None = None,
    ) -> QueryResponse:
        request = qe.QueryRequest(
            limit=limit,
            offset=offset,
            query=_query(query, using),
            prefetches=_prefetches(prefetch),
            filter=_filter(query_filter),
            score_threshold=score_threshold,
            with_payload=_with_payload(with_payload),
            with_vector=_with_vectors(with_vectors),
        )
        scored = self._shard(collection_name).query(request)
        return QueryResponse(
            points=[
                models.ScoredPoint(
                    id=_id_out(p.id),
                    version=p.version,
                    score=p.score,
                    payload=p.payload,
                    vector=_vectors_from_edge(p.vector),
                )
                for p in scored
            ]
        )

    @_held
    def query_batch_points(
        self, collection_name: str, requests: Sequence[models.QueryRequest]
    ) -> list[QueryResponse]:
        """Run several queries; in process, a batch is just one query after another."""
        return [
            self.query_points(
                collection_name,
                query=r.query,
                using=r.using,
                prefetch=r.prefetch,
                query_filter=r.filter,
                limit=r.limit or 10,
                offset=r.offset,
                with_payload=False if r.with_payload is None else r.with_payload,
                with_vectors=False if r.with_vector is None else r.with_vector,
                score_threshold=r.score_threshold,
            )
            for r in requests
        ]

    @_held
    def facet(
        self,
        collection_name: str,
        key: str,
        facet_filter: models.Filter | None = None,
        limit: int = 10,
        exact: bool = False,
    ) -> models.FacetResponse:
        """Count the points per value of a keyword payload field."""
        request = qe.FacetRequest(key=key, limit=limit, exact=exact, filter=_filter(facet_filter))
        hits = self._shard(collection_name).facet(request).hits
        # Unvalidated: a store's facet can have a hit per source (thousands).
        return models.FacetResponse.model_construct(
            hits=[models.FacetValueHit.model_construct(value=h.value, count=h.count) for h in hits]
        )

    # -- lifecycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Index the shards this client's writes made outgrow exact search, close them
        flushed, and give the store up for good."""
        if self._closed:
            return
        atexit.unregister(self.close)
        with self._lease.mutex:
            try:
                written = [name for name in self._written if self.collection_exists(name)]
                if written:
                    with self.hold():
                        for name in written:
                            config = self._read_config(name)
                            _build_index(name, self._shard(name), config, closing=True)
                self._give_up()
            finally:
                self._closed = True
                self._lease.release()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("This EdgeClient is closed; open a new one.")

    def _shard(self, name: str) -> qe.EdgeShard:
        self._check_open()
        shard = self._shards.get(name)
        if shard is None:
            if not self.collection_exists(name):
                raise ValueError(f"Collection {name} not found")
            shard = self._shards[name] = qe.EdgeShard.load(str(self.path / name / SHARD_DIR))
        return shard

    def _write(self, name: str, operation: qe.UpdateOperation, wait: bool) -> None:
        shard = self._shard(name)
        # Edge logs each update in its write-ahead log before applying it, so the update
        # survives a crash of this process. Flushing (~50 ms) happens at most every
        # FLUSH_INTERVAL seconds and at close, as a Qdrant server does.
        shard.update(operation)
        self._written.add(name)
        self._changed()
        now = time.monotonic()
        if wait and now - self._flushed.get(name, 0.0) >= FLUSH_INTERVAL:
            shard.flush()
            self._flushed[name] = now

    def _config_file(self, name: str) -> Path:
        return self.path / name / COLLECTION_FILE

    def _read_config(self, name: str) -> dict[str, Any]:
        self._check_open()
        try:
            return json.loads(self._config_file(name).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"Collection {name} not found") from None

    def _write_config(self, name: str, config: dict[str, Any]) -> None:
        _write_atomic(self._config_file(name), json.dumps(config, ensure_ascii=False, indent=1))


def _write_atomic(target: Path, text: str) -> None:
    """Replace a file's content at once: a reader sees the old text or the new, never a part."""
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)


def _read_generation(root: Path) -> int:
    try:
        return int((root / GENERATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0


def migrate_legacy(legacy: Path, target: EdgeClient) -> list[str]:
    """Move the stores an earlier release kept in qdrant-client's local mode into `target`.

    Runs once: the old folder is renamed to `<name>.migrated` afterwards (kept as a backup),
    so a store deleted later does not come back. Returns the names copied.
    """
    if not (legacy / "meta.json").is_file():
        return []
    try:
        copied = migrate_local(legacy, target)
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreLocked(
                f"The embedded store at {legacy} is in use by another Archivist process.",
                "Wait for it to finish; this release then moves its stores to Qdrant Edge.",
            ) from None
        raise
    backup = legacy.with_name(legacy.name + ".migrated")
    shutil.rmtree(backup, ignore_errors=True)
    legacy.rename(backup)
    if copied:
        sys.stderr.write(
            f"Moved {len(copied)} store(s) ({', '.join(copied)}) from {legacy} to the Qdrant "
            f"Edge engine at {target.path}; the old folder is kept as {backup}: delete it "
            "once you no longer need it.\n"
        )
    return copied


def migrate_local(source: Path, target: EdgeClient, batch: int = 512) -> list[str]:
    """Copy the collections of a qdrant-client local-mode folder into `target`.

    Points keep their ids, vectors and payloads (nothing is re-embedded) and collections their
    metadata. Collections `target` already holds are left alone, except one whose copy was
    interrupted, which is copied again. Returns the names copied.
    """
    legacy = QdrantClient(path=str(source))
    copied = []
    try:
        for description in legacy.get_collections().collections:
            name = description.name
            marker = target.path / name / MIGRATING_FILE
            if target.collection_exists(name):
                if not marker.exists():
                    continue
                target.delete_collection(name)
            info = legacy.get_collection(name)
            target.create_collection(
                name,
                vectors_config=info.config.params.vectors,
                sparse_vectors_config=info.config.params.sparse_vectors,
                metadata=info.config.metadata,
            )
            marker.touch()
            target.create_payload_index(name, "source", models.PayloadSchemaType.KEYWORD)
            offset = None
            while True:
                records, offset = legacy.scroll(
                    name, limit=batch, offset=offset, with_payload=True, with_vectors=True
                )
                points = [
                    models.PointStruct(id=r.id, vector=r.vector or {}, payload=r.payload)
                    for r in records
                ]
                if points:
                    target.upsert(name, points)
                if offset is None:
                    break
            marker.unlink()
            copied.append(name)
    finally:
        legacy.close()
    return copied


def _build_index(
    name: str, shard: qe.EdgeShard, config: dict[str, Any], closing: bool = False
) -> None:
    """Index what of the shard is unindexed, if it is enough to be worth it (see
    INDEXING_THRESHOLD_KB); closing, also the last part of a store that has an index."""
    info = shard.info()
    per_point = len(config["vectors"]) + len(config["sparse_vectors"])
    # Sparse vectors count as indexed as soon as they are stored; what is left is dense.
    unindexed = info.points_count * per_point - info.indexed_vectors_count
    dimension = max((v["size"] for v in config["vectors"].values()), default=0)
    unindexed_kb = unindexed * dimension * 4 / 1024  # as float32: thresholds count vectors
    indexed = info.indexed_vectors_count > info.points_count * len(config["sparse_vectors"])
    tail = closing and config.get("segment_indexing") and indexed
    if unindexed_kb < INDEXING_THRESHOLD_KB and not (tail and unindexed_kb >= TAIL_INDEX_KB):
        return
    sys.stderr.write(f"Indexing store '{name}' ({info.points_count} chunks) for fast search…\n")
    started = time.perf_counter()
    shard.optimize()
    sys.stderr.write(f"Indexed '{name}' in {time.perf_counter() - started:.0f} s.\n")


def _edge_config(
    vectors: Mapping[str, models.VectorParams],
    sparse_vectors: Mapping[str, models.SparseVectorParams],
) -> qe.EdgeConfig:
    for name, params in vectors.items():
        if params.multivector_config or params.quantization_config:
            raise NotImplementedError(f"Vector '{name}': multivectors and quantization.")
    return qe.EdgeConfig(
        vectors={
            name: qe.EdgeVectorParams(
                size=p.size,
                distance=_DISTANCES[p.distance],
                datatype=qe.VectorStorageDatatype.Float16,
            )
            for name, p in vectors.items()
        },
        sparse_vectors={
            name: qe.EdgeSparseVectorParams(
                modifier=qe.Modifier.Idf if p.modifier == models.Modifier.IDF else None
            )
            for name, p in sparse_vectors.items()
        },
        # Edge counts a segment's size in stored bytes: float16 halves them.
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=TAIL_INDEX_KB // 2,
            max_segment_size=SEGMENT_KB // 2,
            default_segment_number=4,
        ),
    )


def _completed() -> models.UpdateResult:
    return models.UpdateResult(status=models.UpdateStatus.COMPLETED)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def _point_id(value: Any) -> int | str:
    return value if isinstance(value, int) else str(value)


def _id_out(value: Any) -> int | str:
    # qdrant-client gives UUID ids as strings; Edge gives uuid.UUID objects.
    return value if isinstance(value, int) else str(value)


def _sparse(vector: models.SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def _vector_to_edge(vector: Any) -> Any:
    if isinstance(vector, models.SparseVector):
        return _sparse(vector)
    if isinstance(vector, models.Document | models.Image | models.InferenceObject):
        raise NotImplementedError("EdgeClient does no inference: pass vectors.")
    return [float(x) for x in vector] if not isinstance(vector, list) else vector


def _vectors_to_edge(vector: Any) -> Any:
    if isinstance(vector, Mapping):
        return {name: _vector_to_edge(v) for name, v in vector.items()}
    return _vector_to_edge(vector)


def _vectors_from_edge(vector: Any) -> Any:
    if vector is None:
        return None
    if isinstance(vector, Mapping):
        return {name: _vectors_from_edge(v) for name, v in vector.items()}
    if isinstance(vector, qe.SparseVector):
        return models.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return list(vector)


def _with_payload(value: Any) -> Any:
    if isinstance(value, models.PayloadSelectorInclude):
        return qe.PayloadSelector.Include(list(value.include))
    if isinstance(value, models.PayloadSelectorExclude):
        return qe.PayloadSelector.Exclude(list(value.exclude))
    return value if isinstance(value, bool) else list(value)


def _with_vectors(value: Any) -> Any:
    return value if isinstance(value, bool) else list(value)


def _nearest(vector: Any, using: str | None) -> qe.Query:
    return qe.Query.Nearest(_vector_to_edge(vector), using=using)


def _query(query: Any, using: str | None) -> Any:
    if query is None:
        return None
    if isinstance(query, models.NearestQuery):
        return _nearest(query.nearest, using)
    if isinstance(query, models.FusionQuery):
        if query.fusion == models.Fusion.DBSF:
            return qe.Fusion.Dbsf()
        return qe.Fusion.Rrf(k=RRF_K)
    if isinstance(query, models.RrfQuery):
        k = RRF_K if query.rrf.k is None else query.rrf.k
        return qe.Fusion.Rrf(k=k, weights=query.rrf.weights)
    if isinstance(query, models.SparseVector | list | tuple) or hasattr(query, "tolist"):
        return _nearest(query, using)
    raise NotImplementedError(f"EdgeClient does not translate {type(query).__name__} queries.")


def _prefetches(prefetch: Any) -> list[qe.Prefetch] | None:
    if prefetch is None:
        return None
    if isinstance(prefetch, models.Prefetch):
        prefetch = [prefetch]
    return [
        qe.Prefetch(
            limit=p.limit if p.limit is not None else 10,
            query=_query(p.query, p.using),
            prefetches=_prefetches(p.prefetch),
            filter=_filter(p.filter),
            score_threshold=p.score_threshold,
        )
        for p in prefetch
    ]


def _filter(value: models.Filter | None) -> qe.Filter | None:
    if value is None:
        return None
    if value.min_should is not None:
        raise NotImplementedError("EdgeClient does not translate min_should filters.")
    return qe.Filter(
        must=_conditions(value.must),
        should=_conditions(value.should),
        must_not=_conditions(value.must_not),
    )


def _conditions(value: Any) -> list[Any] | None:
    if value is None:
        return None
    items: Iterable[Any] = value if isinstance(value, list) else [value]
    return [_condition(c) for c in items]


def _condition(condition: Any) -> Any:
    if isinstance(condition, models.Filter):
        return _filter(condition)
    if isinstance(condition, models.HasIdCondition):
        return qe.HasIdCondition({_point_id(i) for i in condition.has_id})
    if isinstance(condition, models.IsEmptyCondition):
        return qe.IsEmptyCondition(condition.is_empty.key)
    if isinstance(condition, models.IsNullCondition):
        return qe.IsNullCondition(condition.is_null.key)
    if isinstance(condition, models.FieldCondition):
        if condition.match is not None:
            return qe.FieldCondition(key=condition.key, match=_match(condition.match))
        if isinstance(condition.range, models.Range):
            r = condition.range
            return qe.FieldCondition(
                key=condition.key, range=qe.RangeFloat(gte=r.gte, gt=r.gt, lte=r.lte, lt=r.lt)
            )
    raise NotImplementedError(f"EdgeClient does not translate {condition!r}.")


def _match(match: Any) -> Any:
    if isinstance(match, models.MatchValue):
        return qe.MatchValue(match.value)
    if isinstance(match, models.MatchAny):
        return qe.MatchAny(list(match.any))
    if isinstance(match, models.MatchExcept):
        return qe.MatchExcept(list(match.except_))
    if isinstance(match, models.MatchText):
        return qe.MatchText(match.text)
    raise NotImplementedError(f"EdgeClient does not translate {type(match).__name__}.")
