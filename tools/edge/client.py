"""`EdgeClient`: collections as Qdrant Edge shards under one folder, with `QdrantClient`'s
method names (see tools/engine.py), taking and returning records with the names and fields of
`qdrant_client.models` (archivist.tools.points), so that `KnowledgeStore` has one code path
whether its collections live in this process or on a Qdrant server. It translates what the
stores send, no more (archivist.tools.edge.convert).

Edge lets one process at a time open a shard, so the processes sharing `<root>` take turns
through a `Lease` (archivist.tools.lease): a client opens its shards when an operation needs
them and closes them when another process asks for the store, between two operations. A
process that writes also holds `<root>`'s writer lock for its whole run (`writing`).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import os
import shutil
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import qdrant_edge as qe

from archivist.tools import points as records
from archivist.tools.edge import convert
from archivist.tools.edge.convert import (
    SCHEMAS,
    completed,
    edge_filter,
    enum_value,
    id_out,
    jsonable,
    payload_in,
    payload_out,
    point_id,
    selection,
    sparse_params,
    vector_params,
    vectors_from_edge,
    vectors_to_edge,
)
from archivist.tools.edge.files import (
    CHECKSUM_FILE,
    COLLECTION_FILE,
    FORMAT,
    GENERATION_FILE,
    KEPT,
    SEARCHED_FILES,
    SHARD_DIR,
    SealAnswers,
    SealedCounts,
    check_intact,
    drop_answers,
    facet_key,
    load_shard,
    parse_config,
    read_ahead,
    read_ahead_payloads,
    read_generation,
    read_seal,
    seal,
    shard_answers,
    write_atomic,
)
from archivist.tools.edge.indexing import (
    QUANTIZATION,
    TURBO_OVERSAMPLING,
    VECTOR_LAYOUTS,
    AsideBuild,
    SegmentIndexing,
    put_on_disk,
    shard_config,
)
from archivist.tools.engine import TurnTakingEngine
from archivist.tools.errors import ArchivistError, DiskFull, StoreDamaged
from archivist.tools.lease import Lease, WriterLock, stderr_notice

if TYPE_CHECKING:
    from qdrant_client import models

# Seconds between flushes of a shard's segments (a Qdrant server's flush_interval_sec).
FLUSH_INTERVAL = 5.0
# Whether the process ends as soon as the clients closing now are closed (`exit_follows`).
_exit_follows = False
# Shards a closing client left open for the process's exit (see `close`): kept referenced,
# so that nothing drops them before it.
_left_for_exit: list[qe.EdgeShard] = []


@contextmanager
def exit_follows() -> Iterator[None]:
    """Through the block, clients closed are closed for a process that exits right after,
    without its interpreter's teardown (the `archivist` command's end: `os._exit` once its
    exit handlers have run). A shard a client only read is then left open rather than
    closed: Edge drops a shard's files from the page cache when it closes it, so the next
    command would read from disk again every page its search visits (at 99,910 chunks,
    75 MB and 0.6 s of a 0.9 s `search`; ~10 times that at a million chunks). Left to the
    exit, they stay cached, shared with the next process as any file read is."""
    global _exit_follows
    _exit_follows = True
    try:
        yield
    finally:
        _exit_follows = False


# Edge maps its files and lets them grow sparsely (a WAL segment or a page file is 32 MB long
# before anything is in it): touching a page the disk has no room for kills the process with
# SIGBUS, with no message and no cleanup. So a client checks, when it opens and every
# ROOM_CHECK_POINTS points written, that the disk has room for every file's unwritten part
# plus ROOM_MARGIN for the files a write or an index may add, and stops cleanly if not.
ROOM_MARGIN = 160 * 2**20
ROOM_CHECK_POINTS = 512
# Edge reads its write-ahead log's last update again every time it loads a shard, already
# applied as it is (a whole upsert, vectors and all: ~0.06 s of CPU for 1,000 points of 768
# dimensions). So an upsert's last WAL_TAIL_POINTS points are an update of their own, and a
# shard loads as fast after a write of 1,000 points as after one of 8.
WAL_TAIL_POINTS = 8


def _held(method):
    """Run a method with the store's lease held (taken first if another process has it)."""

    @functools.wraps(method)
    def run(self: EdgeClient, *args: Any, **kwargs: Any) -> Any:
        with self.hold():
            return method(self, *args, **kwargs)

    return run


class EdgeClient(SegmentIndexing, TurnTakingEngine):
    """Collections as Qdrant Edge shards under one folder, with `QdrantClient`'s method names.

    It declares `TurnTakingEngine`: processes take turns at it (docs/concurrency.md).
    `wait`: seconds to wait for another process using the store (None: as long as it takes);
    `notify` is told, once a wait lasts, who is being waited for; `layout` (one of
    VECTOR_LAYOUTS) decides when a store's dense vectors go on disk (see `shard_config`).
    """

    def __init__(
        self,
        path: Path | str,
        wait: float | None = None,
        notify: Callable[[str], None] = stderr_notice,
        layout: str = "auto",
    ) -> None:
        if layout not in VECTOR_LAYOUTS:
            raise ValueError(f"The store layout is one of {', '.join(VECTOR_LAYOUTS)}.")
        self.layout = layout
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._check_room()
        self._unroomed = 0  # points written since the last check of the disk's room
        self._lease = Lease(self.path, self._give_up, wait, notify)
        self._writer = WriterLock(self.path, wait, notify)
        self._generation = 0  # the store's, as read when the lease was last taken
        self._seen_generation = 0  # the same, not moved on by this client's own writes
        self._bumped = False  # whether this lease's writes have moved the generation on yet
        self._local_writes = 0
        self._depth = 0  # operations under way (nested), during which the store is kept
        self._shards: dict[str, qe.EdgeShard] = {}
        self._written: set[str] = set()
        self._unsealed: set[str] = set()  # collections written under this lease, unsealed
        self._flushed: dict[str, float] = {}
        self._unchecked: dict[str, int] = {}  # points written since the last index check
        self._indexing: dict[str, AsideBuild] = {}  # segments a child process is indexing
        self._backlog: dict[str, deque[tuple[qe.UpdateOperation, int]]] = {}  # kept during one
        self._aside = 0  # blocks asking for segments to be indexed by a child (indexing_aside)
        self._no_child = False  # a child could not index a segment: this process does it
        # Each collection file's text as read or written under the lease (an ingest reads its
        # store's metadata every batch); forgotten with the lease: others may change them then.
        self._config_texts: dict[str, str] = {}
        # The settings read from each of those texts, for reads that change nothing (a search
        # reads its store's fingerprint several times): parsed once per text.
        self._config_read: dict[str, tuple[str, dict[str, Any]]] = {}
        self._settings_writes = 0  # collections this client made, changed or deleted
        # What listings ask of a shard (counts, facets), answered from its seal while it is
        # not open: a listing need not map the shard (`seal`). Read once a lease.
        self._answers: dict[str, SealAnswers | None] = {}
        self._opened_answers: dict[str, SealAnswers | None] = {}
        """The answers of each open shard's seal when it was opened (see `_closing_answers`)."""
        self._remembered: dict[str, dict[str, Any]] = {}
        """Values callers keep with a collection's seal (`remembered`), to be written with it."""
        self._asked: dict[str, set[tuple[str, int, bool]]] = {}  # facets asked, by collection
        self._hinted: set[str] = set()  # shards whose files were read ahead under this lease
        self._closed = False
        # Closing flushes the shards, indexes a grown store's last part and releases the lock.
        # The CLI (when a command ends), the server and `archivist copy` close explicitly, but
        # a notebook or script using the Python API ends without a close call: its exit is the
        # one moment left to do it, so the hook stays there. An explicit close() unregisters it.
        atexit.register(self.close)
        self._left = False  # shards left open for the process's exit (see `exit_follows`)

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
                self._config_texts.clear()
                self._answers.clear()
                self._hinted.clear()
                self._generation = self._seen_generation = read_generation(self.path)
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

    @property
    def settings_generation(self) -> tuple[int, int]:
        """A value that changes whenever a collection's settings or metadata may have: the
        store's generation when the lease was taken (another process may have written before),
        or this client made, changed or deleted one; read it inside `hold`."""
        return self._seen_generation, self._settings_writes

    def _changed(self) -> None:
        """Record a write: the first one of a lease moves the store's generation on."""
        self._local_writes += 1
        if not self._bumped:
            self._generation += 1
            write_atomic(self.path / GENERATION_FILE, str(self._generation))
            self._bumped = True

    def _give_up(self, leave_read: bool = False) -> None:
        """Close the shards, flushed, so that another process can open them; with
        `leave_read`, those only read are left open for the process's exit instead."""
        try:
            for name in list(self._indexing):
                self._settle(name)
            for name in list(self._backlog):
                self._catch_up(name)
            answers = {
                name: self._closing_answers(name, shard) for name, shard in self._shards.items()
            }
            # Verified this lease, never opened: the values remembered are added to the seal,
            # and a seal of an earlier format is written in the current one.
            for name, kept in self._remembered.items():
                if name not in answers and name not in self._written:
                    answers[name] = (None, kept)
            for name, sealed in self._answers.items():
                if sealed is not None and not sealed.current and name not in answers:
                    answers[name] = (None, {})
            for name, shard in self._shards.items():
                if name in self._unsealed:
                    shard.flush()  # a shard only read has nothing of its own to flush
                if leave_read and name not in self._unsealed and name not in self._written:
                    _left_for_exit.append(shard)  # closed by the exit (see `exit_follows`)
                    self._left = True
                else:
                    shard.close()
            for name, (counts, found) in answers.items():
                # Written: sealed anew. Only read: Edge may still have rewritten a file (an
                # id tracker's versions), verified when opened, so its checksum follows.
                if self.collection_exists(name):
                    seal(self.path, name, name not in self._unsealed, counts, found)
        finally:
            self._shards.clear()
            self._unsealed.clear()
            self._config_texts.clear()
            self._answers.clear()
            self._opened_answers.clear()
            self._remembered.clear()

    def _closing_answers(
        self, name: str, shard: qe.EdgeShard
    ) -> tuple[list[int] | None, dict[str, Any]]:
        """The counts and answers to add to a shard's seal: all counted again if it was
        written; if only read, the facets asked since it was opened that its seal did not
        keep (the counts too if it kept none), and the values remembered."""
        asked = self._asked.get(name, ())
        kept = self._opened_answers.get(name)
        remembered = self._remembered.get(name, {})
        if name in self._unsealed or kept is None or kept.counts is None:
            found = shard_answers(shard, asked)
            return (None, {}) if found is None else (found[0], {**found[1], **remembered})
        missing = [a for a in asked if not kept.has(facet_key(*a))]
        found = shard_answers(shard, missing) if missing else None
        return None, {**(found[1] if found else {}), **remembered}

    # -- collections -------------------------------------------------------------------------

    def collection_exists(self, collection_name: str) -> bool:
        return self._config_file(collection_name).is_file()

    def get_collections(self) -> records.CollectionsResponse:
        names = sorted(p.parent.name for p in self.path.glob(f"*/{COLLECTION_FILE}"))
        return records.CollectionsResponse(
            collections=[records.CollectionDescription(name=n) for n in names]
        )

    @_held
    def get_collection(self, collection_name: str) -> records.CollectionInfo:
        config = self._read_config(collection_name, shared=True)
        # Nothing here waits for an index build: while a child indexes the shard, its counts
        # are those as the build started; while the writes kept meanwhile are applied (the
        # ingest asks for its store's metadata every batch), those of the writes applied.
        build = self._indexing.get(collection_name)
        if build and build.running:
            info = build.info
        else:
            info = self._sealed_counts(collection_name) or self._open(collection_name).info()
        return convert.collection_info(config, info)

    @_held
    def create_collection(
        self,
        collection_name: str,
        vectors_config: models.VectorParams | Mapping[str, models.VectorParams] | None = None,
        sparse_vectors_config: Mapping[str, models.SparseVectorParams] | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        on_disk_payload: bool | None = None,
        hnsw_config: Any = None,
        quantization_config: Any = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        self._check_open()
        if (shard_number, replication_factor, write_consistency_factor) != (None, None, None):
            raise ValueError("The embedded store has one node and one shard: give no layout.")
        if (on_disk_payload, hnsw_config, quantization_config) != (None, None, None):
            raise ValueError(
                "The embedded store lays out its stores itself (its client's `layout`, "
                "ARCHIVIST_STORE_LAYOUT): give no disk or quantization settings."
            )
        if self.collection_exists(collection_name):
            raise ValueError(f"Collection {collection_name} already exists")
        if hasattr(vectors_config, "size"):  # one unnamed vector
            vectors_config = {"": vectors_config}
        vectors = dict(vectors_config or {})
        sparse_vectors = dict(sparse_vectors_config or {})
        folder = self.path / collection_name
        self._check_room()
        self._abandon(collection_name)
        # A folder without its collection file is what an interrupted create or drop leaves.
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        config = {
            "format": FORMAT,
            "vectors": {n: vector_params(p) for n, p in vectors.items()},
            "sparse_vectors": {n: sparse_params(p) for n, p in sparse_vectors.items()},
            "metadata": jsonable(metadata),
            "payload_schema": {},
            # Indexed segment by segment as it grows (stores made before: at close).
            "segment_indexing": True,
            # Dense vectors are stored as float16 (stores made before: float32).
            "vector_datatype": "float16",
            # In memory until the store's layout puts them on disk (stores made before: the
            # same); see SegmentIndexing._to_disk.
            "vectors_on_disk": False,
        }
        if self.layout == "disk" and vectors:
            put_on_disk(config)
        self._shards[collection_name] = qe.EdgeShard.create(
            str(folder / SHARD_DIR), shard_config(config)
        )
        self._changed()
        self._write_config(collection_name, config)
        return True

    @_held
    def update_collection(
        self, collection_name: str, metadata: dict[str, Any] | None = None
    ) -> bool:
        config = self._read_config(collection_name)
        if metadata is not None:
            # Like Qdrant, new metadata keys are merged into the existing ones.
            config["metadata"] = {**(config["metadata"] or {}), **jsonable(metadata)}
            self._write_config(collection_name, config)
        return True

    @_held
    def create_payload_index(
        self,
        collection_name: str,
        field_name: str,
        field_schema: models.PayloadSchemaType,
        wait: bool = True,
    ) -> records.UpdateResult:
        config = self._read_config(collection_name)
        schema = records.PayloadSchemaType(enum_value(field_schema))
        self._shard(collection_name).update(
            qe.UpdateOperation.create_field_index(field_name, SCHEMAS[schema.value])
        )
        config["payload_schema"][field_name] = schema.value
        self._write_config(collection_name, config)
        return completed()

    @_held
    def delete_collection(self, collection_name: str) -> bool:
        self._check_open()
        if not self.collection_exists(collection_name):
            return False
        self._abandon(collection_name)
        shard = self._shards.pop(collection_name, None)
        if shard is not None:
            shard.close()
        self._written.discard(collection_name)
        self._flushed.pop(collection_name, None)
        self._config_texts.pop(collection_name, None)
        self._settings_writes += 1
        self._config_file(collection_name).unlink()
        shutil.rmtree(self.path / collection_name, ignore_errors=True)
        self._changed()
        return True

    @_held
    def set_aside(self, collection_name: str, folder: Path) -> Path:
        """Move a (damaged) collection's files into `folder`, out of the store, and return
        where: nothing is deleted, and the name is free for a new collection."""
        self._check_open()
        self._abandon(collection_name)
        shard = self._shards.pop(collection_name, None)
        if shard is not None:
            shard.close()
        for kept in (self._written, self._unsealed):
            kept.discard(collection_name)
        self._config_texts.pop(collection_name, None)
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"{collection_name}-{time.strftime('%Y%m%d-%H%M%S')}"
        shutil.move(self.path / collection_name, target)
        self._settings_writes += 1
        self._changed()
        return target

    # -- points ------------------------------------------------------------------------------

    @_held
    def count(
        self,
        collection_name: str,
        count_filter: models.Filter | None = None,
        exact: bool = True,
    ) -> records.CountResult:
        counts = self._sealed_counts(collection_name) if count_filter is None else None
        if counts is not None:
            return records.CountResult(count=counts.points_count)
        request = qe.CountRequest(exact=exact, filter=edge_filter(count_filter))
        return records.CountResult(count=self._shard(collection_name).count(request))

    @_held
    def upsert(
        self, collection_name: str, points: Sequence[models.PointStruct], wait: bool = True
    ) -> records.UpdateResult:
        edge_points = [
            qe.Point(point_id(p.id), vectors_to_edge(p.vector), payload_in(p.payload))
            for p in points
        ]
        self._unroomed += len(edge_points)
        if self._unroomed >= ROOM_CHECK_POINTS:
            self._unroomed = 0
            self._check_room()
        head, tail = edge_points[:-WAL_TAIL_POINTS], edge_points[-WAL_TAIL_POINTS:]
        for part in (head, tail) if head else (tail,):
            operation = qe.UpdateOperation.upsert_points(part)
            self._write(collection_name, operation, wait and part is tail, len(part))
        self._count_written(collection_name, len(edge_points))
        return completed()

    @_held
    def delete(
        self, collection_name: str, points_selector: models.Filter, wait: bool = True
    ) -> records.UpdateResult:
        operation = qe.UpdateOperation.delete_points_by_filter(edge_filter(points_selector))
        self._write(collection_name, operation, wait)
        return completed()

    @_held
    def scroll(
        self,
        collection_name: str,
        scroll_filter: models.Filter | None = None,
        limit: int = 10,
        offset: models.ExtendedPointId | None = None,
        with_payload: bool | Sequence[str] | models.PayloadSelector = True,
        with_vectors: bool | Sequence[str] = False,
    ) -> tuple[list[records.Record], int | str | None]:
        request = qe.ScrollRequest(
            offset=None if offset is None else point_id(offset),
            limit=limit,
            filter=edge_filter(scroll_filter),
            with_payload=selection(with_payload),
            with_vector=selection(with_vectors),
        )
        shard = self._shard(collection_name)
        if offset is None and scroll_filter is None and with_payload:
            # The first page of a scroll over every point's payload: the rest will follow.
            read_ahead_payloads(self.path / collection_name / SHARD_DIR)
        found, next_offset = shard.scroll(request)
        # A listing reads every point of a store this way: one plain step a point.
        scrolled = convert.ScrolledRecord
        if with_vectors:
            read = [scrolled(r, payload_out(r.payload), vectors_from_edge(r.vector)) for r in found]
        else:
            read = [scrolled(r, payload_out(r.payload)) for r in found]
        return read, None if next_offset is None else id_out(next_offset)

    @_held
    def query_batch_points(
        self, collection_name: str, requests: Sequence[models.QueryRequest]
    ) -> list[records.QueryResponse]:
        """Run several nearest-vector queries; in process, one after another."""
        return [self._query(collection_name, r) for r in requests]

    def _query(self, collection_name: str, request: models.QueryRequest) -> records.QueryResponse:
        config = self._read_config(collection_name, shared=True)
        more = TURBO_OVERSAMPLING if config.get("quantization") == QUANTIZATION else 1.0
        edge_request = convert.edge_query(request, more)
        return convert.query_response(self._shard(collection_name).query(edge_request))

    @_held
    def facet(
        self,
        collection_name: str,
        key: str,
        limit: int = 10,
        exact: bool = False,
    ) -> records.FacetResponse:
        """Count the points per value of a keyword payload field."""
        self._asked.setdefault(collection_name, set()).add((key, limit, exact))
        sealed = self._sealed(collection_name)
        counted = sealed.get(facet_key(key, limit, exact)) if sealed else None
        if counted is None:
            request = qe.FacetRequest(key=key, limit=limit, exact=exact)
            hits = self._shard(collection_name).facet(request).hits
            counted = [(h.value, h.count) for h in hits]
        return records.FacetResponse(
            hits=[records.FacetValueHit(value=value, count=n) for value, n in counted]
        )

    def _sealed_counts(self, name: str) -> SealedCounts | None:
        """The shard's counts as its seal keeps them (None: ask the shard)."""
        sealed = self._sealed(name)
        return SealedCounts(*sealed.counts) if sealed and sealed.counts else None

    def _sealed(self, name: str) -> SealAnswers | None:
        """The answers kept with a collection's seal, while its shard is not open (checked
        once a lease: see `check_intact`); None when the shard is open or unsealed."""
        if name in self._shards or name in self._indexing:
            return None
        if name not in self._answers:
            self._check_open()
            if not self.collection_exists(name):
                raise ValueError(f"Collection {name} not found")
            self._answers[name] = check_intact(self.path, name)
        return self._answers[name]

    def remembered(self, collection_name: str, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()`, a JSON value derived from what a collection holds, kept with its seal
        until the collection is next written: a later process reads it back instead of
        computing it again (a search's count of partly stored documents: 62,893 versions
        at a million chunks), so it costs what the writes since cost, not what the store
        holds. Computed under one lease, as the collection is."""
        with self.hold():
            name, entry = collection_name, KEPT + key
            if name in self._written or name in self._indexing:
                return compute()
            sealed = self._opened_answers.get(name) if name in self._shards else self._sealed(name)
            value = sealed.get(entry) if sealed else None
            if value is None:
                value = self._remembered.get(name, {}).get(entry)
            if value is None:
                value = compute()
                if name not in self._written and value is not None:
                    self._remembered.setdefault(name, {})[entry] = value
            return value

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
                # Without room, the index waits for a later run; the data is flushed anyway.
                if written and self._has_room():
                    with self.hold():
                        for name in written:
                            self._index_at_close(name)
                self._give_up(leave_read=_exit_follows)
            finally:
                self._closed = True
                if self._left:
                    # Edge holds the shards' write-ahead logs until the exit: the store stays
                    # taken until then too (never yielded: the mutex stays held), and the
                    # kernel releases both at once.
                    self._lease.mutex.acquire()
                else:
                    self._lease.release()

    def _has_room(self) -> bool:
        try:
            self._check_room()
        except DiskFull:
            return False
        return True

    def _check_room(self) -> None:
        """Refuse to go on writing where the disk could fill under Edge's mapped files."""
        unwritten = 0
        # Another process may remove files and whole folders during the walk (a rebuild's
        # temporary store): os.walk skips a folder that is gone, and a file gone is skipped.
        for folder, _, files in os.walk(self.path):
            for name in files:
                try:
                    stat = os.stat(os.path.join(folder, name))
                except OSError:
                    continue
                unwritten += max(0, stat.st_size - stat.st_blocks * 512)
        need, free = unwritten + ROOM_MARGIN, shutil.disk_usage(self.path).free
        if free < need:
            raise DiskFull(
                f"The disk holding the embedded store at {self.path} has {free // 2**20} MB "
                f"free; the store needs {need // 2**20} MB to write safely (its files are "
                "mapped into memory, and a full disk would kill the process).",
                "Free space on that disk, or set ARCHIVIST_HOME to a folder on another disk, "
                "then run the same command again: what was stored is kept.",
            )

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("This EdgeClient is closed; open a new one.")

    def _shard(self, name: str) -> qe.EdgeShard:
        """The collection's shard, open and up to date (a build's backlog applied)."""
        shard = self._open(name)
        self._catch_up(name)
        return shard

    def _open(self, name: str) -> qe.EdgeShard:
        """The collection's shard, open (a child's build waited for)."""
        self._check_open()
        self._settle(name)
        shard = self._shards.get(name)
        if shard is None:
            if not self.collection_exists(name):
                raise ValueError(f"Collection {name} not found")
            # Checked already under this lease (a listing asked first): nobody can have
            # written since. Parsing the seal again cost 0.11 s at a million chunks.
            self._opened_answers[name] = (
                self._answers.pop(name) if name in self._answers else check_intact(self.path, name)
            )
            self._read_ahead(name)
            try:
                shard = load_shard(self.path / name / SHARD_DIR)
            except Exception as exc:  # Edge's reason: a file it cannot read or deserialise
                reason = _edge_reason(exc)
                if any(word in reason for word in _UNWRITABLE):
                    raise ArchivistError(
                        f"Cannot open store '{name}': {reason}.",
                        f"Its files in {self.path / name} must be writable (Qdrant Edge maps "
                        "them): make them so, or set ARCHIVIST_HOME to a folder you can write "
                        "to.",
                    ) from None
                raise StoreDamaged(name, reason) from None
            self._shards[name] = shard
        return shard

    @_held
    def searching(self, collection_name: str) -> None:
        """A search of the collection follows: have the files every dense search of it walks
        read ahead while the caller does what comes first (embedding the question). A hint:
        it returns at once, and does nothing for a shard already open or kept in memory."""
        if collection_name not in self._shards and self.collection_exists(collection_name):
            self._read_ahead(collection_name)

    def _read_ahead(self, name: str) -> None:
        """Ask for a shard on disk's searched files ahead, once a lease (see `read_ahead`)."""
        if name in self._hinted or not self._read_config(name, shared=True).get("vectors_on_disk"):
            return
        self._hinted.add(name)
        # Its graphs and quantized copies are walked by every dense search: read in large
        # reads as Edge loads the shard, not faulted in a page at a time (with nothing
        # cached, a search at a million chunks: 1.7 s against 2.5 s).
        read_ahead(self.path / name / SHARD_DIR, SEARCHED_FILES)

    def _write(self, name: str, operation: qe.UpdateOperation, wait: bool, points: int = 0) -> None:
        shard = self._apply(name, operation, points)
        self._written.add(name)
        self._changed()
        # Edge logs each update in its write-ahead log before applying it, so the update
        # survives a crash of this process. Flushing (~50 ms) happens at most every
        # FLUSH_INTERVAL seconds and at close, as a Qdrant server does.
        now = time.monotonic()
        if shard is not None and wait and now - self._flushed.get(name, 0.0) >= FLUSH_INTERVAL:
            shard.flush()
            self._flushed[name] = now

    def _unseal(self, name: str) -> None:
        """Before a lease's first write to a shard, drop its checksums: written again once the
        shard is flushed and closed, they are never left stale by a process killed between."""
        if name not in self._unsealed:
            # The facets its seal answered are counted again when it is sealed anew; the
            # values remembered are computed again by whoever asks next.
            with contextlib.suppress(OSError, ValueError, TypeError):
                keys = read_seal(self.path / name).keys()
                asked = self._asked.setdefault(name, set())
                asked.update(tuple(json.loads(k)) for k in keys if not k.startswith(KEPT))
            (self.path / name / CHECKSUM_FILE).unlink(missing_ok=True)
            drop_answers(self.path / name)
            self._unsealed.add(name)
            self._remembered.pop(name, None)

    def _config_file(self, name: str) -> Path:
        return self.path / name / COLLECTION_FILE

    def _read_config(self, name: str, shared: bool = False) -> dict[str, Any]:
        """A collection's settings: a dict of the caller's own, or, `shared`, one that every
        shared read of the same text gets, which the caller must not change."""
        self._check_open()
        text = self._config_texts.get(name)
        if shared and text is not None:
            kept = self._config_read.get(name)
            if kept is not None and kept[0] is text:
                return kept[1]
        if text is None:
            try:
                text = self._config_file(name).read_text(encoding="utf-8")
            except FileNotFoundError:
                raise ValueError(f"Collection {name} not found") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise StoreDamaged(name, f"{COLLECTION_FILE} cannot be read ({exc})") from None
            config = parse_config(name, text)
            if self._lease.held:
                self._config_texts[name] = text
        else:
            config = orjson.loads(text)
        if shared and self._lease.held:
            self._config_read[name] = (text, config)
        return config

    def _write_config(self, name: str, config: dict[str, Any]) -> None:
        text = json.dumps(config, ensure_ascii=False, indent=1)
        self._settings_writes += 1
        self._config_texts.pop(name, None)
        write_atomic(self._config_file(name), text)
        self._config_texts[name] = text


# Edge's words for a file it may not write, which is no damage.
_UNWRITABLE = ("Permission denied", "Read-only file system", "os error 13", "os error 30")


def _edge_reason(exc: Exception) -> str:
    """Edge's reason for refusing a shard, on one line, without its error-kind prefixes."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for prefix in ("Service runtime error: ", "IO Error: "):
        text = text.replace(prefix, "")
    return f"Qdrant Edge cannot load it ({text})"
