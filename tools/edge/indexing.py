"""When a shard of the embedded store is indexed or compacted, and where: here, or in a child
process while an ingest goes on.

Small shards are searched exactly (~5 ms at 33,000 768-d chunks on 2 cores); a larger one
gets HNSW indexes one segment at a time as it grows, and its last part when the client
closes (see INDEXING_THRESHOLD_KB). Edge's `optimize` holds the GIL for the whole build (~7 s
for a segment of 33,000 chunks), which would stop every other thread of the process: an
ingest's embedding requests with it. So during an ingest (`indexing_aside`) a segment due
while the store is written is indexed by a child process (`AsideBuild`): the shard is closed,
the child opens, optimizes and closes it, and meanwhile this process keeps its writes to that
collection in order in memory (two segments' worth at most); the first operation that must
read the shard waits for the child, opens the shard again and applies them. The last part,
at close, is indexed here: nothing waits for it any more. A store small enough to be
searched exactly is compacted instead (COMPACT_POINTS); an ingest near its end asks for that
early (`compact_aside`), and a child compacts it the same way beside the ingest's last
embedding requests, so the close has only the few chunks written since left open to writes.

Where a store keeps its dense vectors is decided when it is first indexed (see
`vectors_on_disk`): a store searched exactly keeps them in memory; one large enough for an
index keeps them, its keyword index and its graph on disk (mapped, read as searches need
them) and is searched through a 2-bit copy of its dense vectors (an eighth of the size of
its float16 vectors; a store put on disk before: an int8 copy, half), mapped as well, the
candidates it finds scored again on the vectors themselves (see the store's search).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import qdrant_edge as qe

from archivist.tools import points as records
from archivist.tools.edge.files import COLLECTION_FILE, SHARD_DIR, load_shard, parse_config

if TYPE_CHECKING:
    from archivist.tools.lease import Lease

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
# A store on disk (see `vectors_on_disk`) keeps an int8 copy of its dense vectors (mapped, see
# `shard_config`), each dimension's range cut at this quantile (Qdrant's usual choice: a few
# outliers do not stretch the scale of all the others).
QUANTILE = 0.99
# A store put on disk from now on searches a 2-bit copy of its dense vectors instead
# (TurboQuant: a random rotation, then 2 bits a dimension; 192 bytes a vector against the
# int8 copy's 768): a quarter of the pages a graph walk reads and maps, found as many of the
# exact 10 once TURBO_OVERSAMPLING times the candidates are scored again on the vectors
# (docs/performance.md, "Search accuracy"). Recorded in the collection file as
# `"quantization": "turbo2"` when its vectors go on disk; a store put there before (no such
# entry) keeps its int8 copy.
QUANTIZATION = "turbo2"
TURBO_OVERSAMPLING = 8.0
"""How many times the candidates an int8 search draws (`oversampling`) a 2-bit one draws."""
# Where a client lays out a store's dense vectors (ARCHIVIST_STORE_LAYOUT): `auto` on disk
# from its first index build on (in memory while it is searched exactly), `memory` in memory,
# `disk` on disk from its creation. A store once on disk stays there.
VECTOR_LAYOUTS = ("auto", "memory", "disk")
# The graph a store's index builds make (a compaction sets m=0): Qdrant's default links (m)
# with a wider search for them while building (ef_construct 256, Qdrant's default 100). On
# the scale benchmark at 99,910 chunks, searched with the store's HNSW_EF (384), hit@10
# against exact search went from ~0.97 to 0.988 for 29% more ingest CPU (71 to 91 s) and the
# same memory; m=24 (ef_construct 160) found fewer (0.988 at 512) for a larger graph.
HNSW_M, HNSW_EF_CONSTRUCT, HNSW_FULL_SCAN_KB = 16, 256, 10_000
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
from archivist.tools.edge.indexing import compact_shard
compact_shard(sys.argv[1])
"""

# The stores make cosine collections, nothing else.
_DISTANCES = {records.Distance.COSINE.value: qe.Distance.Cosine}


@dataclass
class AsideBuild:
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
    config = parse_config(path.name, (path / COLLECTION_FILE).read_text(encoding="utf-8"))
    shard = qe.EdgeShard.load(str(path / SHARD_DIR), shard_config(config, 0))
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


def put_on_disk(config: dict[str, Any]) -> None:
    """Lay a collection's settings out on disk: its dense vectors mapped, searched through
    the quantized copy a store put on disk now gets (QUANTIZATION)."""
    config.update(vectors_on_disk=True, quantization=QUANTIZATION)


def shard_config(config: dict[str, Any], hnsw_m: int | None = None) -> qe.EdgeConfig:
    """A shard's Edge configuration, from its collection file's settings. `hnsw_m`, for a load
    before the shard is optimised (Edge keeps what a load is given as the shard's
    configuration): HNSW_M, Qdrant's default graph for the dense vectors (an index build); 0,
    no graph and every segment closed to writes however small (a compaction); None, Edge's
    own graph settings (a new shard). A collection whose `vectors_on_disk` is set gets the
    on-disk layout (see the module's docstring)."""
    float16 = config.get("vector_datatype") == "float16"
    # On disk: mapped, read as searches need them (None: Edge's default, in memory); so is
    # the int8 copy the searches run on. Pinned (read whole into the process at every
    # opening) it cost 730 MB and most of an opening at a million chunks; Cached maps it but
    # reads it all in as well (a `search` at 100,000 chunks: 1.7 s against 0.5 s). Mapped, a search
    # reads the pages its graph walk visits, shared with every process through the page
    # cache: the same results and latency once they are there (measured: hit@10 and p50).
    disk = qe.Memory.Cold if config.get("vectors_on_disk") else None
    quantized: Any = None
    if disk and config.get("quantization") == QUANTIZATION:
        quantized = qe.TurboQuantQuantizationConfig(bits=qe.TurboQuantBitSize.Bits2, memory=disk)
    elif disk:
        quantized = qe.ScalarQuantizationConfig(qe.ScalarType.Int8, quantile=QUANTILE, memory=disk)
    return qe.EdgeConfig(
        vectors={
            name: qe.EdgeVectorParams(
                size=p["size"],
                distance=_DISTANCES[p["distance"]],
                datatype=qe.VectorStorageDatatype.Float16 if float16 else None,
                memory=disk,
                quantization_config=quantized,
            )
            for name, p in config["vectors"].items()
        },
        sparse_vectors={
            name: qe.EdgeSparseVectorParams(
                modifier=qe.Modifier.Idf if p.get("modifier") == records.Modifier.IDF else None,
                memory=disk,
            )
            for name, p in config["sparse_vectors"].items()
        },
        payload_memory=disk,
        hnsw_config=None
        if hnsw_m is None
        else qe.HnswIndexConfig(
            m=hnsw_m,
            ef_construct=HNSW_EF_CONSTRUCT,
            full_scan_threshold=HNSW_FULL_SCAN_KB,
            memory=disk,
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


class SegmentIndexing:
    """The part of `EdgeClient` that indexes and compacts its shards, and keeps a shard's
    writes in order while a child process works on it (see the module's docstring).

    Its own state, set up by the client: `_indexing` (the builds under way), `_backlog` (the
    writes a build left to apply), `_unchecked` (points written since the last index check),
    `_aside` and `_no_child`. It uses the client's shards, settings, lease and `layout` (one
    of VECTOR_LAYOUTS).
    """

    path: Path
    layout: str
    _lease: Lease
    _shards: dict[str, qe.EdgeShard]
    _flushed: dict[str, float]
    _indexing: dict[str, AsideBuild]
    _backlog: dict[str, deque[tuple[qe.UpdateOperation, int]]]
    _unchecked: dict[str, int]
    _aside: int
    _no_child: bool

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

    def compact_aside(self, collection_name: str) -> bool:
        """Compact the collection's part open to writes now, in a child process, if its close
        would (see COMPACT_POINTS): for a writer that will write little more and waits on
        something else meanwhile (an ingest's last embedding requests), so that its close
        need not. Its later writes are kept here until the child is done, as during an index
        build, and a tail smaller than COMPACT_POINTS stays open to writes. Return whether a
        child started; only inside `indexing_aside`."""
        with self.hold():
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
            config = self._mark_compacted(name, self._lay_out(name, config))
            # The child loads the shard configured for a compaction (no graph) and keeps it so.
            program = [COMPACT_PROGRAM, str(self.path / name)]
            return self._optimize_aside(name, config, info, program)

    def _count_written(self, name: str, points: int) -> None:
        """Count points written to a collection; every INDEX_CHECK_POINTS, index the shard's
        unindexed part if it has grown to a segment."""
        unchecked = self._unchecked.get(name, 0) + points
        self._unchecked[name] = unchecked
        if unchecked >= INDEX_CHECK_POINTS and name not in self._indexing:
            self._unchecked[name] = 0
            self._index_segment(name)

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
        build = self._indexing[name] = AsideBuild(
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
        self._shards[name] = load_shard(self.path / name / SHARD_DIR)
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
        self._remembered.pop(name, None)
        self._asked.pop(name, None)
        build = self._indexing.pop(name, None)
        if build is not None:
            build.process.kill()
            build.process.wait()
            build.errors.close()

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

    def _reload(self, name: str, config: dict[str, Any], hnsw_m: int) -> qe.EdgeShard:
        """Close the collection's open shard and load it with `shard_config(config, hnsw_m)`,
        which Edge keeps as its configuration."""
        shard = self._shards.pop(name)
        shard.flush()
        shard.close()
        shard = self._shards[name] = load_shard(
            self.path / name / SHARD_DIR, shard_config(config, hnsw_m)
        )
        return shard

    def _with_graph(self, name: str, config: dict[str, Any]) -> qe.EdgeShard:
        """The open shard, configured to give its segments a graph when optimised (a
        compacted store's is set to give none), and its vectors put on disk if its layout
        says so now (see `_to_disk`); marked as no longer compacted."""
        shard = self._shards[name]
        to_disk = self._to_disk(config, indexed=True)
        if config.get("compacted") or to_disk:
            config = self._read_config(name)
            config.pop("compacted", None)
            if to_disk:
                put_on_disk(config)
            # Marked before the load: a build cut short is done again as configured.
            self._write_config(name, config)
            shard = self._reload(name, config, HNSW_M)
        return shard

    def _to_disk(self, config: dict[str, Any], indexed: bool) -> bool:
        """Whether a collection's dense vectors go on disk at this optimisation (an index
        build if `indexed`, else a compaction): under the client's layout (VECTOR_LAYOUTS),
        `disk` at any, `auto` at an index build (the store has grown past exact search),
        `memory` never; never twice. Edge rewrites every segment laid out otherwise at the
        optimisation that follows: a store made in memory moves to disk then."""
        if config.get("vectors_on_disk") or _dimension(config) == 0:
            return False
        return self.layout == "disk" or (self.layout == "auto" and indexed)

    def _lay_out(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Before a compaction: mark the collection's vectors for disk if its layout says so
        now (see `_to_disk`); return its settings."""
        if not self._to_disk(config, indexed=False):
            return config
        config = self._read_config(name)
        put_on_disk(config)
        self._write_config(name, config)
        return config

    def _compact(self, name: str, config: dict[str, Any]) -> None:
        """Compact the shard's part open to writes into a segment closed to them, with no graph
        (see COMPACT_POINTS), here: nothing waits for it any more."""
        config = self._mark_compacted(name, self._lay_out(name, config))
        self._reload(name, config, 0).optimize()

    def _mark_compacted(self, name: str, config: dict[str, Any]) -> dict[str, Any]:
        """Mark the collection compacted before its compaction starts (one cut short counts
        as one); return its settings."""
        if not config.get("compacted"):
            config = self._read_config(name)
            config["compacted"] = True
            self._write_config(name, config)
        return config

    def _index_at_close(self, name: str) -> None:
        """Index a collection written under this client if its unindexed part is due for it
        at close (see TAIL_INDEX_KB), else compact it if it is worth it, here: nothing waits
        for it any more."""
        config = self._read_config(name)
        shard = self._shard(name)
        info = _index_due(shard, config, closing=True)
        if info is not None:
            _build_index(name, self._with_graph(name, config), info)
        elif _compaction_due(shard, self.path / name / SHARD_DIR, config):
            self._compact(name, config)
