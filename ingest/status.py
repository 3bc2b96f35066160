"""A store against its roots on disk: which sources are up to date, changed, deleted, new
(on disk, not yet stored) or failed last time, without reading what has not moved.

A file whose size and modification time are those recorded when it was last read is up to
date without being opened; one that moved is hashed, with the settings its root was read with,
and compared with the stored version (a file only touched is still up to date)."""

import functools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from archivist.ingest.discovery import Failure, discover_one
from archivist.ingest.roots import Root, RootSet
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import content_hash
from archivist.tools.catalog import SourceInfo
from archivist.tools.errors import ArchivistError
from archivist.tools.store import KnowledgeStore

STATUSES = ("ok", "changed", "deleted", "new", "incomplete", "failed", "unknown")
"""`incomplete`: a source stored in part (its ingest was stopped before all its chunks were
stored); `unknown`: a source no root records (stored before the store kept its roots)."""


@dataclass
class RootStatus:
    """One root's sources and their status."""

    root: Root | None
    """None: the sources no root records."""
    sources: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        found = {status: 0 for status in STATUSES}
        for source in self.sources:
            found[source["status"]] += 1
        return found


def store_status(store: KnowledgeStore) -> list[RootStatus]:
    """Every source of `store`, and every file of its roots not yet stored, with its status
    (`ok`, `changed`, `deleted`, `new`, `incomplete`, `failed`, or `unknown` without a root),
    by root."""
    info = store.info()
    roots = RootSet.of(info)
    held = store.sources()
    fallback = info.get("fingerprint", {}).get("splitter")
    records: dict[str, list[str]] = {}
    for name in held:
        at = name.find("#")
        while at != -1:
            records.setdefault(name[:at], []).append(name)
            at = name.find("#", at + 1)
    shown: set[str] = set()
    listing = []
    for root in roots.roots:
        status = RootStatus(root)
        listing.append(status)
        if root.kind == "url" or not root.disk_path().exists():
            missing = root.kind != "url"
            for name, source in held.items():
                found = roots.owner(name)
                if found is not None and found[0].id == root.id:
                    shown.add(name)
                    reason = f"{root.location} is missing" if missing else None
                    state = "deleted" if missing else "ok" if source.complete else "incomplete"
                    reason = reason or (None if source.complete else _in_part(source))
                    status.sources.append(_row(name, source, root, state, reason))
            continue
        files, failed = _files_of(root, roots, store.name)
        splitter = _splitter(root, fallback)
        for file in files:
            stored = [file.source] if file.source in held else []
            if file.has_records:
                stored += records.get(file.source, [])
            entry = root.files.get(file.relative)
            moved = not entry or entry[:2] != [file.size, file.mtime_ns]
            not_document = root.skipped.get(file.relative)
            if not stored and not_document and not_document[:2] == [file.size, file.mtime_ns]:
                continue  # read last time and found not to be a document: no source, nothing new
            failure = root.failed.get(file.relative)
            if failure and failure[:2] == [file.size, file.mtime_ns]:
                state, reason = "failed", failure[2]
            elif not stored:
                state, reason = "new", None
            elif not held[stored[0]].complete:
                state, reason = "incomplete", _in_part(held[stored[0]])
            elif not moved and (file.has_records or entry[2] == held[stored[0]].doc_hash):
                state, reason = "ok", None
            elif file.has_records:
                state, reason = "changed", None
            else:
                state, reason = _compare(Path(file.path), splitter, held[stored[0]])
            if not stored:
                status.sources.append(_row(file.source, None, root, state, reason))
            for name in stored:
                shown.add(name)
                status.sources.append(_row(name, held[name], root, state, reason))
        for failure in failed:
            if failure.source not in shown:
                status.sources.append(_row(failure.source, None, root, "failed", failure.reason))
        for name, source in held.items():
            if name in shown:
                continue
            found = roots.owner(name)
            if found is not None and found[0].id == root.id:
                shown.add(name)
                status.sources.append(_row(name, source, root, "deleted", None))
        status.sources.sort(key=lambda s: s["source"])
    rest = RootStatus(None)
    for name, source in held.items():
        if name not in shown:
            rest.sources.append(_row(name, source, None, "unknown", None))
    if rest.sources:
        listing.append(rest)
    return listing


def _files_of(root: Root, roots: RootSet, store: str) -> tuple[list, list[Failure]]:
    """The files on disk of a folder or file root, read with its recorded options."""
    from archivist.ingest.request import IngestRequest

    try:
        request = IngestRequest.from_recorded(root, store)
    except ArchivistError:
        request = IngestRequest.build([root.location], store)
    files: dict[str, Any] = {}
    failed: list[Failure] = []
    skipped: list[Failure] = []
    relative = Path(root.location).name if root.kind == "file" else ""
    naming = roots.namer(root)
    discover_one(
        root.disk_path(), relative, naming, root.id, request.loader, request.folder_rules,
        files, failed, skipped,
    )  # fmt: skip
    return list(files.values()), failed


def _in_part(source: SourceInfo) -> str:
    """Why a source is `incomplete`: `stored in part (2 of 5 chunks): its ingest was stopped`."""
    return (
        f"stored in part ({source.chunks:,} of {source.expected_chunks:,} chunks): its ingest "
        "was stopped"
    )


def _splitter(root: Root, fallback: dict[str, Any] | None) -> SplitterSettings:
    recorded = root.options.get("splitter") or fallback
    try:
        return SplitterSettings(**recorded) if recorded else SplitterSettings()
    except TypeError:
        return SplitterSettings()


def _compare(path: Path, splitter: SplitterSettings, stored: SourceInfo) -> tuple[str, str | None]:
    try:
        if path.stat().st_size == 0:
            return "changed", "emptied: the next sync or ingest removes its chunks"
        digest = content_hash(path, splitter)
    except Exception as exc:  # noqa: BLE001 - unreadable now: the next ingest says why
        return "changed", str(getattr(exc, "strerror", None) or exc)
    return ("ok" if digest == stored.doc_hash else "changed"), None


def _row(
    name: str, source: SourceInfo | None, root: Root | None, status: str, reason: str | None
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "source": name,
        "chunks": source.chunks if source is not None else 0,
        "root": root.location if root is not None else None,
        "status": status,
    }
    if reason:
        row["reason"] = reason
    row["complete"] = source is not None and source.complete
    row["ingested_at"] = None if source is None else _when(int(source.ingested_at))
    return row


@functools.lru_cache(maxsize=4096)
def _when(timestamp: int) -> str:
    """A time as ISO 8601 in UTC (an ingest stores many sources in the same second)."""
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="seconds")
