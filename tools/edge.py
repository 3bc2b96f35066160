"""Qdrant Edge (Qdrant's in-process engine) behind the `Engine` seam the stores code against.

`EdgeClient` has `QdrantClient`'s method names (see tools/engine.py) and takes and returns
records with the names and fields of `qdrant_client.models` (Archivist's light ones,
archivist.tools.points; it reads qdrant-client's too), so `KnowledgeStore` has one code path
whether its collections live in this process or on a Qdrant server. It translates what the
stores send, no more.
Each collection is one Edge shard in `<root>/<name>/shard`; what Edge does not keep (the
collection's vector configuration, its metadata and payload indexes) is in
`<root>/<name>/collection.json`, replaced atomically. A collection exists once that file does.

Edge lets one process at a time open a shard, so the processes sharing `<root>` take turns
through a `Lease` (archivist.tools.lease): a client opens its shards when an operation needs
them and closes them when another process asks for the store, between two operations. A
process that writes also holds `<root>`'s writer lock for its whole run (`writing`).

Small shards are searched exactly (~5 ms at 33,000 768-d chunks on 2 cores); a larger one
gets HNSW indexes one segment at a time as it grows, and its last part when the client
closes (see INDEXING_THRESHOLD_KB). Edge's `optimize` holds the GIL for the whole build (~7 s
for a segment of 33,000 chunks), which would stop every other thread of the process: an
ingest's embedding requests with it. So during an ingest (`indexing_aside`) a segment due
while the store is written is indexed by a child process (`_Indexing`): the shard is closed,
the child opens, optimizes and closes it, and meanwhile this process keeps its writes to that
collection in order in memory (two segments' worth at most); the first operation that must
read the shard waits for the child, opens the shard again and applies them. The last part,
at close, is indexed here: nothing waits for it any more. A store small enough to be
searched exactly is compacted instead (COMPACT_POINTS); an ingest near its end asks for that
early (`compact_aside`), and a child compacts it the same way beside the ingest's last
embedding requests, so the close has only the few chunks written since left open to writes.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import qdrant_edge as qe

from archivist.tools import points as records
from archivist.tools.engine import TurnTakingEngine
from archivist.tools.errors import ArchivistError, DiskFull, StoreDamaged
from archivist.tools.lease import Lease, WriterLock, stderr_notice

if TYPE_CHECKING:
    from qdrant_client import models

COLLECTION_FILE = "collection.json"
SHARD_DIR = "shard"
GENERATION_FILE = "generation"
MIGRATING_FILE = "migrating"
CHECKSUM_FILE = "checksums.json"
_CHECKSUM_BLOCK = 1 << 16
_ZEROS = memoryview(bytes(_CHECKSUM_BLOCK))
FORMAT = 1
SEAL_FORMAT = 2
"""The seal's: its checksums and the answers kept with them (the first: checksums alone)."""
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
# A store below INDEXING_THRESHOLD_KB keeps its points in a segment open to writes, whose
# keyword index and payload indexes Edge rebuilds in memory at every opening (~0.1 s at
# 22,000 chunks: most of a `search`'s start). Closing after writes, a writer compacts that
# segment into one closed to writes, whose indexes are read as they were written, once it
# holds COMPACT_POINTS or more (~1.5 s at 22,000 chunks, once; small edits never pay it).
# Its dense vectors get no graph (HNSW with m=0: searched exactly, as before), so the store
# is `compacted` until it grows to an index: that build gives them their graph.
COMPACT_POINTS = 2_000
# Qdrant's default graph, which a store's index builds use (a compaction sets m=0).
HNSW_M, HNSW_EF_CONSTRUCT, HNSW_FULL_SCAN_KB = 16, 100, 10_000
# Writes of a build's backlog applied before each later write (see EdgeClient._catch_up).
BACKLOG_SLICE = 3
# What the child process indexing a segment runs (`python -c`, the shard's folder as its
# argument): qdrant-edge alone, none of Archivist's imports.
INDEX_PROGRAM = """\
import sys
import qdrant_edge
shard = qdrant_edge.EdgeShard.load(sys.argv[1])
shard.optimize()
shard.close()
"""
# What the child process compacting a shard runs (`python -c`, the collection's folder as its
# argument; this interpreter and environment, so the same Archivist): the shard loaded as a
# compaction configures it (Edge keeps what a load is given), optimised and closed.
COMPACT_PROGRAM = """\
import sys
from archivist.tools.edge import compact_shard
compact_shard(sys.argv[1])
"""
# Seconds between flushes of a shard's segments (a Qdrant server's flush_interval_sec).
FLUSH_INTERVAL = 5.0
# Edge maps its files and lets them grow sparsely (a WAL segment or a page file is 32 MB long
# before anything is in it): touching a page the disk has no room for kills the process with
# SIGBUS, with no message and no cleanup. So a client checks, when it opens and every
# ROOM_CHECK_POINTS points written, that the disk has room for every file's unwritten part
# plus ROOM_MARGIN for the files a write or an index may add, and stops cleanly if not.
ROOM_MARGIN = 160 * 2**20
ROOM_CHECK_POINTS = 512

# The stores make cosine collections and keyword payload indexes, nothing else.
_DISTANCES = {records.Distance.COSINE.value: qe.Distance.Cosine}
_SCHEMAS = {records.PayloadSchemaType.KEYWORD.value: qe.PayloadSchemaType.Keyword}


@dataclass
class _Indexing:
    """A segment of one shard being indexed by a child process, and the writes kept here for
    that shard until it is done."""

    process: subprocess.Popen
    errors: Any
    """The child's stderr (a temporary file), for the message if it fails."""
    info: Any
    """The shard's `ShardInfo` when the build started: its counts while the child runs."""
    room: int
    """How many points may wait here: two segments' worth (~230 MB at 33,000 768-d chunks
    each), more than an ingest writes during a build even on 2 busy cores (~42,000 seen in
    25 s). A writer faster than that then waits for the build, rather than holding everything
    in memory and leaving it all for one large index at close."""
    say: bool = True
    """Whether the build is an index's, said as it starts and ends (a compaction is not)."""
    started: float = field(default_factory=time.perf_counter)
    pending: list[tuple[qe.UpdateOperation, int]] = field(default_factory=list)
    """The writes kept, in order, each with its number of points."""
    kept: int = 0
    """Points in `pending`."""

    @property
    def running(self) -> bool:
        return self.process.poll() is None


def _held(method):
    """Run a method with the store's lease held (taken first if another process has it)."""

    @functools.wraps(method)
    def run(self: EdgeClient, *args: Any, **kwargs: Any) -> Any:
        with self.hold():
            return method(self, *args, **kwargs)

    return run


class EdgeClient(TurnTakingEngine):
    """Collections as Qdrant Edge shards under one folder, with `QdrantClient`'s method names.

    It declares `TurnTakingEngine`: processes take turns at it (docs/concurrency.md).
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
        self._indexing: dict[str, _Indexing] = {}  # segments a child process is indexing
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
        self._answers: dict[str, dict[str, Any]] = {}
        self._opened_answers: dict[str, dict[str, Any]] = {}
        """The answers of each open shard's seal when it was opened (see `_closing_answers`)."""
        self._asked: dict[str, set[tuple[str, int, bool]]] = {}  # facets asked, by collection
        self._closed = False
        # Closing flushes the shards, indexes a grown store's last part and releases the lock.
        # The CLI (when a command ends), the server and `archivist copy` close explicitly, but
        # a notebook or script using the Python API ends without a close call: its exit is the
        # one moment left to do it, so the hook stays there. An explicit close() unregisters it.
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
                self._config_texts.clear()
                self._answers.clear()
                self._generation = self._seen_generation = _read_generation(self.path)
                self._bumped = False
            self._depth += 1
            try:
                yield
            finally:
                self._depth -= 1

    @contextmanager
    def indexing_aside(self) -> Iterator[None]:
        """Through the block, index a segment due while the store is written in a child
        process (see the module's docstring): for writers that wait on something else, whose
        thread must not stop for seconds (an ingest's embedding requests). A writer that only
        writes (a copy) is faster indexing here, one segment after another."""
        self._aside += 1
        try:
            yield
        finally:
            self._aside -= 1

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
            _write_atomic(self.path / GENERATION_FILE, str(self._generation))
            self._bumped = True

    def _give_up(self) -> None:
        """Close the shards, flushed, so that another process can open them."""
        try:
            for name in list(self._indexing):
                self._settle(name)
            for name in list(self._backlog):
                self._catch_up(name)
            answers = {
                name: self._closing_answers(name, shard) for name, shard in self._shards.items()
            }
            for name, shard in self._shards.items():
                if name in self._unsealed:
                    shard.flush()  # a shard only read has nothing of its own to flush
                shard.close()
            for name in self._shards:
                # Written: sealed anew. Only read: Edge may still have rewritten a file (an
                # id tracker's versions), verified when opened, so its checksum follows.
                seal(self.path, name, name not in self._unsealed, answers[name])
        finally:
            self._shards.clear()
            self._unsealed.clear()
            self._config_texts.clear()
            self._answers.clear()
            self._opened_answers.clear()

    def _closing_answers(self, name: str, shard: qe.EdgeShard) -> dict[str, Any]:
        """The answers to keep with a shard's new seal: counted again if it was written; if
        only read, those its seal kept when it was opened, and the facets asked since that it
        did not keep."""
        asked = self._asked.get(name, ())
        kept = self._opened_answers.get(name) or {}
        if name in self._unsealed or "counts" not in kept:
            return _answers(shard, asked)
        missing = [a for a in asked if _facet_key(*a) not in kept.get("facets", {})]
        return _answers(shard, missing) if missing else kept

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
        return records.CollectionInfo(
            indexed_vectors_count=info.indexed_vectors_count,
            points_count=info.points_count,
            segments_count=info.segments_count,
            payload_schema={
                key: records.PayloadIndexInfo(data_type=schema, points=0)
                for key, schema in config["payload_schema"].items()
            },
            config=records.CollectionConfig(
                params=records.CollectionParams(
                    vectors={
                        name: records.VectorParams(
                            size=params["size"], distance=records.Distance(params["distance"])
                        )
                        for name, params in config["vectors"].items()
                    },
                    sparse_vectors={
                        name: records.SparseVectorParams(modifier=_modifier(params.get("modifier")))
                        for name, params in config["sparse_vectors"].items()
                    },
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
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        self._check_open()
        if (shard_number, replication_factor, write_consistency_factor) != (None, None, None):
            raise ValueError("The embedded store has one node and one shard: give no layout.")
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
            "vectors": {n: _vector_params(p) for n, p in vectors.items()},
            "sparse_vectors": {n: _sparse_params(p) for n, p in sparse_vectors.items()},
            "metadata": _jsonable(metadata),
            "payload_schema": {},
            # Indexed segment by segment as it grows (stores made before: at close).
            "segment_indexing": True,
            # Dense vectors are stored as float16 (stores made before: float32).
            "vector_datatype": "float16",
        }
        self._shards[collection_name] = qe.EdgeShard.create(
            str(folder / SHARD_DIR), _shard_config(config)
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
    ) -> records.UpdateResult:
        config = self._read_config(collection_name)
        schema = records.PayloadSchemaType(_value(field_schema))
        self._shard(collection_name).update(
            qe.UpdateOperation.create_field_index(field_name, _SCHEMAS[schema.value])
        )
        config["payload_schema"][field_name] = schema.value
        self._write_config(collection_name, config)
        return _completed()

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
        request = qe.CountRequest(exact=exact, filter=_filter(count_filter))
        return records.CountResult(count=self._shard(collection_name).count(request))

    @_held
    def upsert(
        self, collection_name: str, points: Sequence[models.PointStruct], wait: bool = True
    ) -> records.UpdateResult:
        edge_points = [
            qe.Point(_point_id(p.id), _vectors_to_edge(p.vector), _payload_in(p.payload))
            for p in points
        ]
        self._unroomed += len(edge_points)
        if self._unroomed >= ROOM_CHECK_POINTS:
            self._unroomed = 0
            self._check_room()
        operation = qe.UpdateOperation.upsert_points(edge_points)
        self._write(collection_name, operation, wait, len(edge_points))
        unchecked = self._unchecked.get(collection_name, 0) + len(edge_points)
        self._unchecked[collection_name] = unchecked
        if unchecked >= INDEX_CHECK_POINTS and collection_name not in self._indexing:
            self._unchecked[collection_name] = 0
            self._index_segment(collection_name)
        return _completed()

    def _index_segment(self, name: str) -> None:
        """Index the shard's unindexed part if it has grown to a segment: in a child process,
        the writes meanwhile kept here (see the module's docstring); in this one if a child
        could not do it before."""
        config = self._read_config(name)
        if not config.get("segment_indexing"):
            return
        self._check_room()  # an index is written as a new segment
        shard = self._shards[name]
        info = _index_due(shard, config)
        if info is None:
            return
        shard = self._with_graph(name, config)  # the child loads it as configured here
        if not self._aside or self._no_child or not self._optimize_aside(name, config, info):
            _build_index(name, self._shard(name), info)

    @_held
    def compact_aside(self, collection_name: str) -> bool:
        """Compact the collection's part open to writes now, in a child process, if its close
        would (see COMPACT_POINTS): for a writer that will write little more and waits on
        something else meanwhile (an ingest's last embedding requests), so that its close
        need not. Its later writes are kept here until the child is done, as during an index
        build, and a tail smaller than COMPACT_POINTS stays open to writes. Return whether a
        child started; only inside `indexing_aside`."""
        name = collection_name
        if not self._aside or self._no_child or name in self._indexing:
            return False
        config = self._read_config(name)
        shard = self._shard(name)
        if _index_due(shard, config, closing=True) is not None:
            return False  # the close indexes it instead
        if not _compaction_due(shard, self.path / name / SHARD_DIR, config):
            return False
        if not self._has_room():  # a compaction writes a new segment: the close tries again
            return False
        info = shard.info()
        config = self._mark_compacted(name, config)
        # The child loads the shard configured for a compaction (no graph) and keeps it so.
        program = [COMPACT_PROGRAM, str(self.path / name)]
        return self._optimize_aside(name, config, info, program)

    def _optimize_aside(
        self, name: str, config: dict[str, Any], info: Any, compaction: list[str] | None = None
    ) -> bool:
        """Have a child process optimise the open shard (an index build, the shard loaded as
        configured here; or the `compaction` program and its arguments), keeping this
        collection's writes here meanwhile; False if no child could start (this process
        then does the work)."""
        shard = self._shards.pop(name)
        shard.flush()
        shard.close()
        self._flushed[name] = time.monotonic()
        import tempfile

        program = compaction or [INDEX_PROGRAM, str(self.path / name / SHARD_DIR)]
        errors = tempfile.TemporaryFile()  # noqa: SIM115 - closed once the build is settled
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", *program],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=errors,
                # Ctrl-C at the terminal stops the ingest, which waits for the build to end;
                # the lease's lock goes along, so if this process dies first, nobody opens
                # the shard before the child has closed it.
                start_new_session=True,
                pass_fds=self._lease.fds(),
            )
        except (OSError, ValueError):  # cannot start one here (ValueError: no pass_fds)
            errors.close()
            self._no_child = True
            return False
        if compaction is None:
            _say_indexing(name, info)
        room = 2 * int(INDEXING_THRESHOLD_KB * 1024 / (4 * max(1, _dimension(config))))
        build = self._indexing[name] = _Indexing(
            process, errors, info, max(1, room), say=compaction is None
        )
        # Writes of the last build not applied yet wait for this one (in their order): their
        # points are indexed with the next segment.
        build.pending = list(self._backlog.pop(name, ()))
        build.kept = sum(points for _, points in build.pending)
        return True

    def _settle(self, name: str) -> None:
        """Wait for a child indexing the shard and open it again; the writes kept meanwhile
        become its backlog (see `_catch_up`)."""
        build = self._indexing.get(name)
        if build is None:
            return
        code = build.process.wait()  # (interrupted here, the build and its writes stay)
        del self._indexing[name]
        build.errors.seek(0)
        reason = build.errors.read().decode("utf-8", "replace").strip().splitlines()
        build.errors.close()
        self._shards[name] = qe.EdgeShard.load(str(self.path / name / SHARD_DIR))
        if code == 0:
            if build.say:
                _say_indexed(name, build.started)
        else:
            self._no_child = True
            why = reason[-1] if reason else f"exit status {code}"
            work = ("Indexing", "indexes") if build.say else ("Compacting", "compacts")
            sys.stderr.write(
                f"{work[0]} '{name}' in a helper process failed ({why}); this process "
                f"{work[1]} it from now on.\n"
            )
        if build.pending:
            self._backlog[name] = deque(build.pending)

    def _catch_up(self, name: str, most: int | None = None) -> None:
        """Apply the shard's backlog in order: all of it, or at most `most` writes.

        A build's backlog is thousands of writes (~0.45 ms each: an ingest's upserts and a
        delete of older versions per source): applied all at once they would hold this
        thread for seconds, and with it the embedding requests it keeps going. So each later
        write applies a slice of it first; a read applies all of it.
        """
        backlog = self._backlog.get(name)
        if backlog is None:
            return
        shard = self._shards[name]
        for _ in range(len(backlog) if most is None else min(most, len(backlog))):
            shard.update(backlog.popleft()[0])
        if not backlog:
            del self._backlog[name]
            _return_freed_memory()

    def _abandon(self, name: str) -> None:
        """Stop a child indexing a collection that is being removed; drop the writes kept
        and the answers read from its seal."""
        self._backlog.pop(name, None)
        self._answers.pop(name, None)
        self._asked.pop(name, None)
        build = self._indexing.pop(name, None)
        if build is not None:
            build.process.kill()
            build.process.wait()
            build.errors.close()

    @_held
    def delete(
        self, collection_name: str, points_selector: models.Filter, wait: bool = True
    ) -> records.UpdateResult:
        operation = qe.UpdateOperation.delete_points_by_filter(_filter(points_selector))
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
    ) -> tuple[list[records.Record], int | str | None]:
        request = qe.ScrollRequest(
            offset=None if offset is None else _point_id(offset),
            limit=limit,
            filter=_filter(scroll_filter),
            with_payload=_selection(with_payload),
            with_vector=_selection(with_vectors),
        )
        found, next_offset = self._shard(collection_name).scroll(request)
        return (
            [
                records.Record(
                    id=_id_out(r.id),
                    payload=_payload_out(r.payload),
                    vector=_vectors_from_edge(r.vector),
                )
                for r in found
            ],
            None if next_offset is None else _id_out(next_offset),
        )

    @_held
    def query_batch_points(
        self, collection_name: str, requests: Sequence[models.QueryRequest]
    ) -> list[records.QueryResponse]:
        """Run several nearest-vector queries; in process, one after another."""
        return [self._query(collection_name, r) for r in requests]

    def _query(self, collection_name: str, request: models.QueryRequest) -> records.QueryResponse:
        query = request.query
        if not (isinstance(query, list) or _is_sparse(query)):
            raise NotImplementedError("EdgeClient runs nearest-vector queries only.")
        edge_request = qe.QueryRequest(
            limit=request.limit or 10,
            query=qe.Query.Nearest(_vector_to_edge(query), using=request.using),
            filter=_filter(request.filter),
            with_payload=_selection(request.with_payload or False),
            with_vector=_selection(request.with_vector or False),
        )
        scored = self._shard(collection_name).query(edge_request)
        return records.QueryResponse(
            points=[
                records.ScoredPoint(
                    id=_id_out(p.id),
                    version=p.version,
                    score=p.score,
                    payload=_payload_out(p.payload),
                    vector=_vectors_from_edge(p.vector),
                )
                for p in scored
            ]
        )

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
        counted = (sealed or {}).get("facets", {}).get(_facet_key(key, limit, exact))
        if counted is None:
            request = qe.FacetRequest(key=key, limit=limit, exact=exact)
            hits = self._shard(collection_name).facet(request).hits
            counted = [(h.value, h.count) for h in hits]
        return records.FacetResponse(
            hits=[records.FacetValueHit(value=value, count=n) for value, n in counted]
        )

    def _sealed_counts(self, name: str) -> _Counts | None:
        """The shard's counts as its seal keeps them (None: ask the shard)."""
        sealed = self._sealed(name)
        return _Counts(*sealed["counts"]) if sealed and "counts" in sealed else None

    def _sealed(self, name: str) -> dict[str, Any] | None:
        """The answers kept with a collection's seal, while its shard is not open (checked
        quickly, once a lease: see `check_intact`); None when the shard is open or unsealed."""
        if name in self._shards or name in self._indexing:
            return None
        if name not in self._answers:
            self._check_open()
            if not self.collection_exists(name):
                raise ValueError(f"Collection {name} not found")
            self._answers[name] = check_intact(self.path, name, quick=True)
        return self._answers[name] or None

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
                            config = self._read_config(name)
                            shard = self._shard(name)
                            info = _index_due(shard, config, closing=True)
                            if info is not None:
                                _build_index(name, self._with_graph(name, config), info)
                            elif _compaction_due(shard, self.path / name / SHARD_DIR, config):
                                self._compact(name, config)
                self._give_up()
            finally:
                self._closed = True
                self._lease.release()

    def _reload(self, name: str, config: dict[str, Any], hnsw_m: int) -> qe.EdgeShard:
        """Close the collection's open shard and load it with `_shard_config(config, hnsw_m)`,
        which Edge keeps as its configuration."""
        shard = self._shards.pop(name)
        shard.flush()
        shard.close()
        shard = self._shards[name] = qe.EdgeShard.load(
            str(self.path / name / SHARD_DIR), _shard_config(config, hnsw_m)
        )
        return shard

    def _with_graph(self, name: str, config: dict[str, Any]) -> qe.EdgeShard:
        """The open shard, configured to give its segments a graph when optimised (a
        compacted store's is set to give none); marked as no longer compacted."""
        shard = self._shards[name]
        if config.get("compacted"):
            shard = self._reload(name, config, HNSW_M)
            config = self._read_config(name)
            del config["compacted"]
            self._write_config(name, config)
        return shard

    def _compact(self, name: str, config: dict[str, Any]) -> None:
        """Compact the shard's part open to writes into a segment closed to them, with no graph
        (see COMPACT_POINTS), here: nothing waits for it any more."""
        config = self._mark_compacted(name, config)
        self._reload(name, config, 0).optimize()

    def _mark_compacted(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Mark the collection compacted before its compaction starts (one cut short counts
        as one); return its settings."""
        if not config.get("compacted"):
            config = self._read_config(name)
            config["compacted"] = True
            self._write_config(name, config)
        return config

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
            self._answers.pop(name, None)
            self._opened_answers[name] = check_intact(self.path, name)
            try:
                shard = qe.EdgeShard.load(str(self.path / name / SHARD_DIR))
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

    def _apply(self, name: str, operation: qe.UpdateOperation, points: int) -> qe.EdgeShard | None:
        """Apply a write to the shard and return it, or keep the write for later, in order,
        and return None: while a child indexes the shard (room permitting), or while the
        last build's backlog is still being applied (see `_catch_up`)."""
        build = self._indexing.get(name)
        if build is not None and build.kept + points <= build.room and build.running:
            build.pending.append((operation, points))  # applied in order after the build
            build.kept += points
            return None
        shard = self._open(name)
        self._unseal(name)
        if name in self._backlog:
            self._catch_up(name, BACKLOG_SLICE)
            if name in self._backlog:
                self._backlog[name].append((operation, points))
                return None
        shard.update(operation)
        return shard

    def _unseal(self, name: str) -> None:
        """Before a lease's first write to a shard, drop its checksums: written again once the
        shard is flushed and closed, they are never left stale by a process killed between."""
        if name not in self._unsealed:
            # The facets its seal answered are counted again when it is sealed anew.
            with contextlib.suppress(OSError, ValueError, TypeError):
                facets = _read_seal(self.path / name)["answers"].get("facets", {})
                asked = self._asked.setdefault(name, set())
                asked.update(tuple(json.loads(key)) for key in facets)
            (self.path / name / CHECKSUM_FILE).unlink(missing_ok=True)
            self._unsealed.add(name)

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
            config = _parse_config(name, text)
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
        _write_atomic(self._config_file(name), text)
        self._config_texts[name] = text


# Edge's words for a file it may not write, which is no damage.
_UNWRITABLE = ("Permission denied", "Read-only file system", "os error 13", "os error 30")
_CONFIG_KEYS = ("vectors", "sparse_vectors", "payload_schema")


def _parse_config(name: str, text: str) -> dict[str, Any]:
    """A collection file's settings, or StoreDamaged saying what is wrong with it."""
    try:
        config = orjson.loads(text)  # ~half json's time: a large store's file lists its files
    except ValueError as exc:
        raise StoreDamaged(name, f"{COLLECTION_FILE} is not valid JSON ({exc})") from None
    if (
        not isinstance(config, dict)
        or "metadata" not in config
        or any(not isinstance(config.get(key), dict) for key in _CONFIG_KEYS)
    ):
        raise StoreDamaged(name, f"{COLLECTION_FILE} lacks the store's settings")
    return config


def check_intact(root: Path, name: str, quick: bool = False) -> dict[str, Any]:
    """Check, cheaply, what a collection's own files declare before Edge maps them: its
    settings file, its shard's folder and configuration, each segment's state file, its WAL's
    first index, and, if the shard was sealed when last closed, its segments' checksums.
    Raise StoreDamaged naming the first thing wrong; return the seal's answers (see `seal`),
    empty when the shard is not sealed.

    `quick` (a listing that answers from the seal without mapping the shard): a file whose
    size and time are those sealed is taken as sealed, others are read and compared. Opening
    the shard checks every file, whatever its time says."""
    folder = root / name
    shard = folder / SHARD_DIR
    if not shard.is_dir():
        raise StoreDamaged(name, f"its shard folder {shard} is missing")
    declared = [shard / "edge_config.json", *sorted(shard.glob("segments/*/segment.json"))]
    first = shard / "wal" / "first-index"
    if first.exists():  # absent in a shard never written
        declared.append(first)
    for path in declared:
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreDamaged(name, f"{path.relative_to(root)} is missing") from None
        except (OSError, ValueError) as exc:
            problem = "is empty" if path == first and not path.read_bytes().strip() else None
            raise StoreDamaged(
                name, f"{path.relative_to(root)} {problem or f'cannot be read ({exc})'}"
            ) from None
    try:
        sealed = _read_seal(folder)
    except FileNotFoundError:
        return {}  # written since it was last closed, or by an earlier release: nothing to compare
    except (OSError, ValueError):
        raise StoreDamaged(name, f"{CHECKSUM_FILE} cannot be read") from None
    for relative, (expected, size, mtime) in sealed["files"].items():
        path = shard / relative
        if not path.is_file():
            raise StoreDamaged(name, f"{path.relative_to(root)} is missing")
        if quick:
            stat = path.stat()
            if (stat.st_size, stat.st_mtime_ns) == (size, mtime):
                continue
        if _checksum(path) != expected:
            raise StoreDamaged(
                name, f"{path.relative_to(root)} no longer holds what was written to it"
            )
    return sealed["answers"]


def _read_seal(folder: Path) -> dict[str, Any]:
    """A collection's seal: {"files": {relative path: [checksum, size, time]}, "answers": …}.
    Raise FileNotFoundError without one, ValueError for one that cannot be read."""
    sealed = orjson.loads((folder / CHECKSUM_FILE).read_bytes())
    if isinstance(sealed, dict) and sealed.get("format") == SEAL_FORMAT:
        files, answers = sealed.get("files"), sealed.get("answers")
    else:  # the first format: the checksums alone
        files, answers = sealed, {}
    if (
        not isinstance(files, dict)
        or not isinstance(answers, dict)
        or not all(isinstance(v, list) and len(v) == 3 for v in files.values())
    ):
        raise ValueError("not a seal")
    return {"files": files, "answers": answers}


def seal(
    root: Path, name: str, only_changed: bool = False, answers: dict[str, Any] | None = None
) -> None:
    """Record the checksums of a closed shard's segment files (vectors, payloads, the id
    tracker), to be compared when it is next opened, and `answers`: what listings ask of the
    shard (its counts, the facets asked), true for as long as the seal is, since the first
    write to the shard removes it (`_unseal`). With `only_changed` (a shard only read,
    verified when opened), only files whose size or time changed are read again, the
    answers kept are added to, and nothing is written if nothing changed or if the shard has
    no checksums to keep up to date."""
    folder = root / name
    shard, target = folder / SHARD_DIR, folder / CHECKSUM_FILE
    known: dict[str, list[int]] = {}
    kept: dict[str, Any] = {}
    if only_changed:
        try:
            before = _read_seal(folder)
        except (OSError, ValueError):
            return
        known, kept = before["files"], before["answers"]
    sums, changed = {}, not only_changed
    for path in _sealed_files(shard):
        relative, info = path.relative_to(shard).as_posix(), path.stat()
        entry = known.get(relative)
        if entry and entry[1:] == [info.st_size, info.st_mtime_ns]:
            sums[relative] = entry
        else:
            sums[relative] = [_checksum(path), info.st_size, info.st_mtime_ns]
            changed = True
    merged = {
        **kept,
        **(answers or {}),
        "facets": {**kept.get("facets", {}), **(answers or {}).get("facets", {})},
    }
    if changed or sums.keys() != known.keys() or merged != kept:
        # Compact, and by orjson: an indented dump goes through json's pure-Python encoder,
        # ~0.1 s for the 2,000 versions of a 2,000-file store.
        sealed = {"format": SEAL_FORMAT, "files": sums, "answers": merged}
        _write_atomic(target, orjson.dumps(sealed).decode("utf-8"))


def _sealed_files(shard: Path) -> list[Path]:
    """The segment files that only writes change: not the payload indexes (rebuilt as Edge
    sees fit) nor the journals and trackers that reading updates."""
    found = []
    for segment in sorted(shard.glob("segments/*")):
        for folder, dirs, files in os.walk(segment):
            dirs[:] = sorted(d for d in dirs if d != "payload_index")
            for file in sorted(files):
                if file not in ("tracker_journal.dat", "tracker.dat"):
                    found.append(Path(folder, file))
    return found


def _checksum(path: Path) -> int:
    """CRC-32 of a file's non-zero blocks, each with its offset: the same whether the file's
    zeros are holes (Edge's files are sparse) or written out (after a copy). Holes are skipped
    without reading, so the cost is that of the data the file holds."""
    crc = 0
    buffer = bytearray(_CHECKSUM_BLOCK)
    view = memoryview(buffer)
    with path.open("rb", buffering=0) as file:
        fd, size, offset = file.fileno(), os.fstat(file.fileno()).st_size, 0
        while offset < size:
            try:
                offset = os.lseek(fd, offset, os.SEEK_DATA)
                end = os.lseek(fd, offset, os.SEEK_HOLE)
            except OSError as exc:
                if exc.errno == errno.ENXIO:  # no data past the offset
                    break
                end = size  # a file system without SEEK_DATA: read it all
            offset -= offset % _CHECKSUM_BLOCK
            file.seek(offset)
            while offset < end:
                read = file.readinto(buffer)
                if not read:
                    break
                block = view[:read]
                # Compared with zeros (a memcmp), and checksummed in place: no copies.
                if block != _ZEROS[:read]:
                    crc = zlib.crc32(block, zlib.crc32(offset.to_bytes(8, "little"), crc))
                offset += read
    return crc


@dataclass(frozen=True)
class _Counts:
    """A shard's counts as a seal keeps them (the fields of Edge's `ShardInfo` read here)."""

    points_count: int
    indexed_vectors_count: int
    segments_count: int


def _facet_key(key: str, limit: int, exact: bool) -> str:
    return json.dumps([key, limit, exact])


def _answers(shard: qe.EdgeShard, asked: Iterable[tuple[str, int, bool]]) -> dict[str, Any]:
    """What listings ask of an open shard, to keep with its seal: its counts, and the facets
    asked of it under the lease (counted again: writes may have followed)."""
    try:
        info = shard.info()
        facets = {}
        for key, limit, exact in asked:
            hits = shard.facet(qe.FacetRequest(key=key, limit=limit, exact=exact)).hits
            facets[_facet_key(key, limit, exact)] = [[h.value, h.count] for h in hits]
    except Exception:  # noqa: BLE001 - nothing kept: the next listing opens the shard
        return {}
    counts = [info.points_count, info.indexed_vectors_count, info.segments_count]
    return {"counts": counts, "facets": facets}


def _edge_reason(exc: Exception) -> str:
    """Edge's reason for refusing a shard, on one line, without its error-kind prefixes."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    for prefix in ("Service runtime error: ", "IO Error: "):
        text = text.replace(prefix, "")
    return f"Qdrant Edge cannot load it ({text})"


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


def _dimension(config: dict[str, Any]) -> int:
    """The largest dense vector size of a collection (0 if it has none)."""
    return max((v["size"] for v in config["vectors"].values()), default=0)


def _vectors_kb(vectors: int, config: dict[str, Any]) -> float:
    """What `vectors` dense vectors of the collection weigh as float32, in KB: the unit of
    the indexing thresholds, which count vectors whatever their stored datatype."""
    return vectors * _dimension(config) * 4 / 1024


def compact_shard(folder: str) -> None:
    """Compact the shard of the collection in `folder` (its part open to writes made a segment
    closed to them, with no graph); what the child `compact_aside` starts runs."""
    path = Path(folder)
    config = _parse_config(path.name, (path / COLLECTION_FILE).read_text(encoding="utf-8"))
    shard = qe.EdgeShard.load(str(path / SHARD_DIR), _shard_config(config, 0))
    shard.optimize()
    shard.close()


def _index_due(shard: qe.EdgeShard, config: dict[str, Any], closing: bool = False) -> Any:
    """The shard's `ShardInfo` if enough of it is unindexed to be worth an index (see
    INDEXING_THRESHOLD_KB; closing, also the last part of a store that has one), else None."""
    info = shard.info()
    if config.get("compacted"):  # Edge counts a compacted segment's vectors as indexed
        unindexed, indexed = info.points_count * len(config["vectors"]), False
    else:
        unindexed = _not_indexed(info, config)
        indexed = info.indexed_vectors_count > info.points_count * len(config["sparse_vectors"])
    unindexed_kb = _vectors_kb(unindexed, config)
    tail = closing and config.get("segment_indexing") and indexed
    if unindexed_kb < INDEXING_THRESHOLD_KB and not (tail and unindexed_kb >= TAIL_INDEX_KB):
        return None
    return info


def _compaction_due(shard: qe.EdgeShard, shard_dir: Path, config: dict[str, Any]) -> bool:
    """Whether a written shard's part open to writes is worth compacting (COMPACT_POINTS): in
    a store small enough to be searched exactly, none of whose segments has a graph."""
    if _dimension(config) == 0 or not config.get("segment_indexing"):
        return False
    info = shard.info()
    if _vectors_kb(info.points_count, config) >= INDEXING_THRESHOLD_KB:
        return False
    open_to_writes = _not_indexed(info, config) // len(config["vectors"])
    return open_to_writes >= COMPACT_POINTS and not _graphs(shard_dir)


def _not_indexed(info: Any, config: dict[str, Any]) -> int:
    """The dense vectors Edge counts as not indexed: those of segments open to writes (sparse
    vectors count as indexed as soon as they are stored, and so do a compacted segment's)."""
    per_point = len(config["vectors"]) + len(config["sparse_vectors"])
    return info.points_count * per_point - info.indexed_vectors_count


def _graphs(shard_dir: Path) -> bool:
    """Whether a segment of the shard has a graph, as the segments' own files say."""
    for path in shard_dir.glob("segments/*/segment.json"):
        try:
            vectors = orjson.loads(path.read_bytes())["config"]["vector_data"]
        except (OSError, ValueError, KeyError, TypeError):
            return True  # unknown: left as it is
        for vector in vectors.values():
            index = vector.get("index") or {}
            if index.get("type") == "hnsw" and (index.get("options") or {}).get("m"):
                return True
    return False


def _shard_config(config: dict[str, Any], hnsw_m: int | None = None) -> qe.EdgeConfig:
    """A shard's Edge configuration, from its collection file's settings. `hnsw_m`, for a load
    before the shard is optimised (Edge keeps what a load is given as the shard's
    configuration): HNSW_M, Qdrant's default graph for the dense vectors (an index build); 0,
    no graph and every segment closed to writes however small (a compaction); None, Edge's
    own graph settings (a new shard)."""
    float16 = config.get("vector_datatype") == "float16"
    return qe.EdgeConfig(
        vectors={
            name: qe.EdgeVectorParams(
                size=p["size"],
                distance=_DISTANCES[p["distance"]],
                datatype=qe.VectorStorageDatatype.Float16 if float16 else None,
            )
            for name, p in config["vectors"].items()
        },
        sparse_vectors={
            name: qe.EdgeSparseVectorParams(
                modifier=qe.Modifier.Idf if p.get("modifier") == records.Modifier.IDF else None
            )
            for name, p in config["sparse_vectors"].items()
        },
        hnsw_config=None
        if hnsw_m is None
        else qe.HnswIndexConfig(
            m=hnsw_m, ef_construct=HNSW_EF_CONSTRUCT, full_scan_threshold=HNSW_FULL_SCAN_KB
        ),
        # Edge counts a segment's size in stored bytes: float16 halves them.
        optimizers=qe.EdgeOptimizersConfig(
            indexing_threshold=1 if hnsw_m == 0 else TAIL_INDEX_KB // 2,
            max_segment_size=SEGMENT_KB // 2,
            default_segment_number=4,
        ),
    )


def _return_freed_memory() -> None:
    """Give the heap a build's backlog freed back to the system (glibc keeps it otherwise).

    Its points were allocated by this thread and the next index is built by the engine's
    own threads, which cannot reuse that memory: measured at 100,000 chunks, the last index
    at close raised the peak RSS from ~880 MB to ~1,080 MB without this.
    """
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)


def _say_indexing(name: str, info: Any) -> None:
    sys.stderr.write(f"Indexing store '{name}' ({info.points_count} chunks) for fast search…\n")


def _say_indexed(name: str, started: float) -> None:
    sys.stderr.write(f"Indexed '{name}' in {time.perf_counter() - started:.0f} s.\n")


def _build_index(name: str, shard: qe.EdgeShard, info: Any) -> None:
    """Index the shard here and now (holding the GIL throughout)."""
    _say_indexing(name, info)
    started = time.perf_counter()
    shard.optimize()
    _say_indexed(name, started)


def _completed() -> records.UpdateResult:
    return records.UpdateResult(status=records.UpdateStatus.COMPLETED)


def _value(value: Any) -> Any:
    """An enum's value (qdrant-client's or ours), or the value itself."""
    return getattr(value, "value", value)


def _modifier(value: str | None) -> records.Modifier | None:
    return None if value is None else records.Modifier(value)


def _vector_params(params: Any) -> dict[str, Any]:
    """A dense vector's settings as the collection file keeps them."""
    if not isinstance(params, records.VectorParams):  # qdrant-client's (a store moved over)
        return params.model_dump(mode="json")
    return {"size": params.size, "distance": _value(params.distance)}


def _sparse_params(params: Any) -> dict[str, Any]:
    if not isinstance(params, records.SparseVectorParams):
        return params.model_dump(mode="json")
    return {"modifier": _value(params.modifier)}


def _is_sparse(vector: Any) -> bool:
    """Whether `vector` is a sparse vector record (ours or qdrant-client's)."""
    return hasattr(vector, "indices") and hasattr(vector, "values")


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
    if _is_sparse(vector):
        return _sparse(vector)
    return vector if isinstance(vector, list) else [float(x) for x in vector]


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
        return records.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return list(vector)


# Fields kept as their JSON text in an Edge shard, and given back as what they were. Edge
# converts each payload value by trying one type after another, which costs ~10 µs for a
# string and ~90 µs for a chunk's metadata (a dict of lists): two thirds of a chunk's payload,
# and the largest part of an ingest's own CPU. Nothing filters on them. Stores written before
# hold them as they are, read as they are.
PACKED_FIELDS = ("metadata",)


def _payload_in(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """A point's payload as Edge stores it: PACKED_FIELDS as JSON text (in a copy: the
    caller's payload is left as it was)."""
    packed = payload
    for key in PACKED_FIELDS:
        value = payload.get(key) if payload else None
        if isinstance(value, dict):
            if packed is payload:
                packed = dict(payload)
            packed[key] = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return packed


def _payload_out(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """A payload as Edge gives it back, PACKED_FIELDS read from their JSON text."""
    if not payload:
        return payload
    for key in PACKED_FIELDS:
        text = payload.get(key)
        if isinstance(text, str):
            payload[key] = orjson.loads(text)
    return payload


def _selection(value: bool | Sequence[str]) -> bool | list[str]:
    """All (True), none (False) or the named payload fields or vectors."""
    return value if isinstance(value, bool) else list(value)


def _filter(value: models.Filter | None) -> qe.Filter | None:
    """Translate the filters the stores make: field conditions that must (not) match."""
    if value is None:
        return None
    if value.should is not None or value.min_should is not None:
        raise NotImplementedError("EdgeClient translates must and must_not filters only.")
    return qe.Filter(must=_conditions(value.must), must_not=_conditions(value.must_not))


def _conditions(value: Any) -> list[Any] | None:
    if value is None:
        return None
    return [_condition(c) for c in (value if isinstance(value, list) else [value])]


def _condition(condition: Any) -> Any:
    # qdrant-client's records or ours: the same class names and fields.
    if type(condition).__name__ == "FieldCondition" and condition.match is not None:
        return qe.FieldCondition(key=condition.key, match=_match(condition.match))
    raise NotImplementedError(f"EdgeClient does not translate {condition!r}.")


def _match(match: Any) -> Any:
    kind = type(match).__name__
    if kind == "MatchValue":
        return qe.MatchValue(match.value)
    if kind == "MatchAny":
        return qe.MatchAny(list(match.any))
    raise NotImplementedError(f"EdgeClient does not translate {kind}.")
