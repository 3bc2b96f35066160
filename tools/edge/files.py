"""A collection's own files in an embedded store: its settings file, its shard's seal (the
checksums of its segment files and the answers kept with them), and the store's generation.

Each collection is one Edge shard in `<root>/<name>/shard`; what Edge does not keep (the
collection's vector configuration, its metadata and payload indexes) is in
`<root>/<name>/collection.json`, replaced atomically. A collection exists once that file does.
"""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import uuid
import zlib
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISREG
from typing import Any

import orjson
import qdrant_edge as qe

from archivist.tools.errors import StoreDamaged

COLLECTION_FILE = "collection.json"
SHARD_DIR = "shard"
GENERATION_FILE = "generation"
MIGRATING_FILE = "migrating"
CHECKSUM_FILE = "checksums.json"
_CHECKSUM_BLOCK = 1 << 16
_ZEROS = memoryview(bytes(_CHECKSUM_BLOCK))
ANSWERS_DIR = "answers"
FORMAT = 1
SEAL_FORMAT = 3
"""The seal's: its checksums, the shard's counts, and the names of the files in ANSWERS_DIR
holding the other answers kept with it (the second format: every answer in the seal; the
first: checksums alone)."""
KEPT = "kept "
"""What a key of the answers a caller keeps (`EdgeClient.remembered`) starts with; the other
keys are facets' (`facet_key`)."""

_CONFIG_KEYS = ("vectors", "sparse_vectors", "payload_schema")


def parse_config(name: str, text: str) -> dict[str, Any]:
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


WHOLE_CHECK_BYTES = 1 << 16
"""Sealed files up to this size are checksummed at every check whatever their time says
(their metadata-like files: ~0.3 MB in all at 100,000 chunks); larger ones (vectors,
payload pages, indexes: GBs at a million chunks) only when their size or time changed."""


def check_intact(root: Path, name: str) -> SealAnswers | None:
    """Check, cheaply, what a collection's own files declare before Edge maps them: its
    settings file, its shard's folder and configuration, each segment's state file, its WAL's
    first index, and, if the shard was sealed when last closed, its segments' files against
    the seal. Raise StoreDamaged naming the first thing wrong; return the seal's answers (see
    `seal`), empty when the shard is not sealed.

    A sealed file is read and its checksum compared when its size or modification time is
    not the one sealed, and always when it is small (WHOLE_CHECK_BYTES); a larger file whose
    size and time are those sealed is taken as sealed. So opening a store costs the same at
    any size, instead of reading every stored byte (measured: ~5 s of CPU at a million
    chunks), and a file changed in place by anything that writes it is found; what changes
    a large file without its time (a disk's own bit rot) is not, here."""
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
        sealed = read_seal(folder)
    except FileNotFoundError:
        return None  # written since it was last closed, or by an earlier release: none to compare
    except (OSError, ValueError):
        raise StoreDamaged(name, f"{CHECKSUM_FILE} cannot be read") from None
    for relative, (expected, size, mtime) in sealed.files.items():
        path = shard / relative
        try:
            info = path.stat()
        except FileNotFoundError:
            info = None
        if info is None or not S_ISREG(info.st_mode):
            raise StoreDamaged(name, f"{path.relative_to(root)} is missing")
        if size > WHOLE_CHECK_BYTES and (info.st_size, info.st_mtime_ns) == (size, mtime):
            continue
        if _checksum(path) != expected:
            raise StoreDamaged(
                name, f"{path.relative_to(root)} no longer holds what was written to it"
            )
    return sealed


class SealAnswers:
    """What a seal keeps besides its checksums: the shard's counts, and answers by key (the
    facets listings asked, the values callers keep), each read from its own file in
    ANSWERS_DIR when first asked for. So opening a store reads the few answers a command
    uses, not every one kept (a million chunks' facets of versions and sources: 17 MB)."""

    def __init__(
        self,
        folder: Path,
        files: dict[str, list[int]],
        counts: list[int] | None,
        kept: dict[str, str],
        values: dict[str, Any] | None = None,
        current: bool = True,
    ) -> None:
        self.folder = folder
        self.files = files
        """The checksums: {relative path: [checksum, size, time]}."""
        self.counts = counts
        self.kept = kept
        """The answers' file names in ANSWERS_DIR, by key."""
        self.values = dict(values or {})
        """The answers read (or, from a seal of the second format, held in it), by key."""
        self.current = current
        """Whether the seal is of the current format (else it is written anew when closed)."""

    def keys(self) -> set[str]:
        return self.kept.keys() | self.values.keys()

    def has(self, key: str) -> bool:
        """Whether an answer is kept under `key` (its file there, unread)."""
        return key in self.values or (
            key in self.kept and (self.folder / ANSWERS_DIR / self.kept[key]).is_file()
        )

    def get(self, key: str) -> Any:
        """The answer kept under `key`, or None (none kept, or its file cannot be read: the
        caller asks the shard, as if none had been kept)."""
        if key not in self.values:
            file = self.kept.get(key)
            if file is None:
                return None
            try:
                self.values[key] = orjson.loads((self.folder / ANSWERS_DIR / file).read_bytes())
            except (OSError, ValueError):
                return None
        return self.values[key]


def read_seal(folder: Path) -> SealAnswers:
    """A collection's seal (its answers read when asked for). Raise FileNotFoundError without
    one, ValueError for one that cannot be read."""
    sealed = orjson.loads((folder / CHECKSUM_FILE).read_bytes())
    counts, kept, values = None, {}, {}
    form = sealed.get("format") if isinstance(sealed, dict) else None
    if form == SEAL_FORMAT:
        files, counts, kept = sealed.get("files"), sealed.get("counts"), sealed.get("answers")
    elif form == 2:
        files, answers = sealed.get("files"), sealed.get("answers")
        if not isinstance(answers, dict) or not isinstance(answers.get("facets", {}), dict):
            raise ValueError("not a seal")
        counts, values = answers.get("counts"), answers.get("facets", {})
    else:  # the first format: the checksums alone
        files = sealed
    if (
        not isinstance(files, dict)
        or not isinstance(kept, dict)
        or not all(isinstance(v, str) for v in kept.values())
        or not (counts is None or (isinstance(counts, list) and len(counts) == 3))
        or not all(isinstance(v, list) and len(v) == 3 for v in files.values())
    ):
        raise ValueError("not a seal")
    return SealAnswers(folder, files, counts, kept, values, form == SEAL_FORMAT)


def seal(
    root: Path,
    name: str,
    only_changed: bool = False,
    counts: list[int] | None = None,
    answers: dict[str, Any] | None = None,
) -> None:
    """Record the checksums of a closed shard's segment files (vectors, payloads, the id
    tracker), to be compared when it is next opened, its `counts` and `answers` (by key:
    the facets listings asked, the values callers keep), true for as long as the seal is,
    since the first write to the shard removes it (`_unseal`); each answer in a file of its
    own. With `only_changed` (a shard only read, verified when opened), only files whose
    size or time changed are read again, the answers kept are added to, and nothing is
    written if nothing changed or if the shard has no checksums to keep up to date."""
    folder = root / name
    shard, target = folder / SHARD_DIR, folder / CHECKSUM_FILE
    known: dict[str, list[int]] = {}
    kept: dict[str, str] = {}
    inline: dict[str, Any] = {}  # answers a seal of the second format held in itself
    current = True
    if only_changed:
        try:
            before = read_seal(folder)
        except (OSError, ValueError):
            return
        known, kept, current = before.files, dict(before.kept), before.current
        counts = counts or before.counts
        inline = {k: v for k, v in before.values.items() if k not in before.kept}
    sums, changed = {}, not only_changed or not current
    for path in _sealed_files(shard):
        relative, info = path.relative_to(shard).as_posix(), path.stat()
        entry = known.get(relative)
        if entry and entry[1:] == [info.st_size, info.st_mtime_ns]:
            sums[relative] = entry
        else:
            sums[relative] = [_checksum(path), info.st_size, info.st_mtime_ns]
            changed = True
    new = {**inline, **(answers or {})}
    if not (changed or new or sums.keys() != known.keys()):
        return
    answered = folder / ANSWERS_DIR
    if new:
        answered.mkdir(exist_ok=True)
    for key, value in new.items():
        kept[key] = f"{uuid.uuid4().hex}.json"
        write_atomic(answered / kept[key], orjson.dumps(value).decode("utf-8"))
    # Compact, and by orjson: an indented dump goes through json's pure-Python encoder.
    sealed = {"format": SEAL_FORMAT, "files": sums, "counts": counts, "answers": kept}
    write_atomic(target, orjson.dumps(sealed).decode("utf-8"))
    drop_answers(folder, keep=set(kept.values()))


def drop_answers(folder: Path, keep: Collection[str] = ()) -> None:
    """Remove the answer files of a collection's seal that `keep` does not name (those of a
    seal replaced or removed)."""
    with contextlib.suppress(FileNotFoundError):
        for path in (folder / ANSWERS_DIR).iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)


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
        # No read-ahead: what this reads into the page cache then stays in small pages. Read
        # ahead, the kernel caches it in large folios, and a search faulting one vector in
        # maps the whole folio: measured at 100,000 chunks, a dense search then held 135 MB
        # of the vectors' file in its resident set instead of 3 MB.
        with contextlib.suppress(OSError, AttributeError):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
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


SEARCHED_FILES = ("segments/*/vector_storage-*/quantized.data", "segments/*/vector_index-*/links*")
"""What every dense search of a shard on disk walks: each segment's quantized copy and graph
(~230 MB at a million chunks, 2-bit copies), read ahead when the shard is opened."""


def read_ahead_payloads(shard: Path) -> None:
    """Ask the kernel to read a shard's payload files into the page cache, their data ranges
    only (they are sparse), before a scroll over every point: Edge maps them and would
    otherwise fault them in a page at a time (~0.1 s of CPU at 24,000 chunks)."""
    read_ahead(shard, ("segments/*/payload_storage/*.dat",))


def read_ahead(shard: Path, patterns: Iterable[str]) -> None:
    """Ask the kernel to read a shard's files matching `patterns` into the page cache, their
    data ranges only (they are sparse), in large sequential reads. A hint: it reads nothing
    itself (what is cached already costs a look-up), and fails silently where the system
    has no such call."""
    for path in (found for pattern in patterns for found in shard.glob(pattern)):
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            offset, size = 0, os.fstat(fd).st_size
            while offset < size:
                offset = os.lseek(fd, offset, os.SEEK_DATA)
                end = os.lseek(fd, offset, os.SEEK_HOLE)
                os.posix_fadvise(fd, offset, end - offset, os.POSIX_FADV_WILLNEED)
                offset = end
        except (OSError, AttributeError):  # past the last data (ENXIO), or no such calls
            pass
        finally:
            os.close(fd)


def load_shard(shard: Path, config: qe.EdgeConfig | None = None) -> qe.EdgeShard:
    """Load a shard (with `config`, which Edge then keeps as its own) for this process to
    search and write, its keyword indexes read at random (`advise_random_reads`): every
    load of a shard here, the first and those after an index build."""
    loaded = (
        qe.EdgeShard.load(str(shard)) if config is None else qe.EdgeShard.load(str(shard), config)
    )
    advise_random_reads(shard)
    return loaded


RANDOM_READ_FILES = ("inverted_index.dat",)
"""The files of a shard Edge maps that a search reads a few pages of, here and there: each
keyword index (a term's postings and the table finding them)."""


def advise_random_reads(shard: Path, names: Collection[str] = RANDOM_READ_FILES) -> int:
    """Tell the kernel that this process's mappings of a shard's files called `names` are read
    at random, so a page fault there reads that page, not the pages around it as well; return
    how many mappings were advised. Linux reads up to `read_ahead_kb` around a fault in a
    mapped file (8 MB on some virtual disks, 128 KB by default): one keyword search of a
    million-chunk store of 27 segments, each index faulted at its table and at each term's
    postings, read 440 MB of them that way, 0.35 s with nothing cached, against 0.01 s
    advised. Edge maps the files itself, in this process; where the system has no such
    calls (no /proc, no madvise) nothing is done."""
    prefix = str(shard.resolve()) + os.sep
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            ranges = [
                (int(start, 16), int(end, 16))
                for start, end, path in _mapped_files(maps)
                if path.startswith(prefix) and os.path.basename(path) in names
            ]
        madvise, random = _madvise(), mmap.MADV_RANDOM
    except (OSError, AttributeError, ValueError):
        return 0
    return sum(madvise(start, end - start, random) == 0 for start, end in ranges)


def _mapped_files(maps: Iterable[str]) -> Iterable[tuple[str, str, str]]:
    """(start, end, path) of each file mapping in /proc/PID/maps lines."""
    for line in maps:
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            start, _, end = fields[0].partition("-")
            yield start, end, fields[5].rstrip("\n")


def _madvise() -> Any:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    madvise = libc.madvise
    madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    madvise.restype = ctypes.c_int
    return madvise


@dataclass(frozen=True)
class SealedCounts:
    """A shard's counts as a seal keeps them (the fields of Edge's `ShardInfo` read here)."""

    points_count: int
    indexed_vectors_count: int
    segments_count: int


def facet_key(key: str, limit: int, exact: bool) -> str:
    return json.dumps([key, limit, exact])


def shard_answers(
    shard: qe.EdgeShard, asked: Iterable[tuple[str, int, bool]]
) -> tuple[list[int], dict[str, Any]] | None:
    """What listings ask of an open shard, to keep with its seal: its counts, and the facets
    asked of it under the lease (counted again: writes may have followed) by `facet_key`;
    None if the shard cannot answer."""
    try:
        info = shard.info()
        facets = {}
        for key, limit, exact in asked:
            hits = shard.facet(qe.FacetRequest(key=key, limit=limit, exact=exact)).hits
            facets[facet_key(key, limit, exact)] = [[h.value, h.count] for h in hits]
    except Exception:  # noqa: BLE001 - nothing kept: the next listing opens the shard
        return None
    return [info.points_count, info.indexed_vectors_count, info.segments_count], facets


def write_atomic(target: Path, text: str) -> None:
    """Replace a file's content at once: a reader sees the old text or the new, never a part."""
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    with temporary.open("w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, target)


def read_generation(root: Path) -> int:
    try:
        return int((root / GENERATION_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
