"""The roots a store was ingested from, and the unique names of their sources.

A root is a folder, a file or a site (a URL) that a store's documents come from, recorded in
the store's own metadata (`archivist.roots`, a list of `Root.to_dict()`) with the options
that shaped its documents, so that the store can be synced again without retyping them. A
source's identity is (root, path inside the root); its name, the chunks' `source`, is unique
in the store: the path inside the root in a store of one root, `label/path` with several (a
file root's name is its label). Labels are made once, when a root is added, and kept.
The options are the ingest request's to write and read back (`IngestRequest.recorded_options`,
`IngestRequest.from_recorded`).
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from archivist.ingest.urls import prefix_of
from archivist.tools.catalog import packed_records, unpacked_records
from archivist.tools.errors import ArchivistError

if TYPE_CHECKING:  # the request records its options with the roots: it imports this module
    from archivist.ingest.discovery import Failure, FoundFile, SourceFile
    from archivist.ingest.request import IngestRequest

ROOTS_KEY = "roots"
"""The store metadata key holding the roots (a list of `Root.to_dict()`)."""
RENAMING_KEY = "renaming"
"""The store metadata key holding source renames under way ({old name: new name}): a rename
cut short is finished by the next ingest."""
KINDS = ("folder", "file", "url")


class RootsStore(Protocol):
    """What the roots need of a store: its metadata, where they are recorded, and its
    sources' names (a `KnowledgeStore`)."""

    def info(self) -> dict[str, Any]: ...

    def exists(self) -> bool: ...

    def annotate(self, **fields: Any) -> None: ...

    def source_names(self) -> list[str]: ...

    def rename_sources(self, renames: dict[str, str]) -> int: ...

    def delete_source(self, source: str) -> int: ...


@dataclass
class Root:
    """One root of a store: where its documents come from and how they were read."""

    id: str
    """Stable id: a digest of `kind` and `location`."""
    kind: str
    """"folder", "file" or "url"."""
    location: str
    """A folder's or file's canonical absolute path; a URL as given (normalised)."""
    label: str
    """Short and unique in the store: the folder's (file's, site's) name, with as many of its
    parents as it takes to be unique (`en`, `docs/en`)."""
    options: dict[str, Any] = field(default_factory=dict)
    """The options that shaped its documents, as `ingest` takes them (include, exclude,
    text_extensions, loaders, text_field, id_field, chunk_size, chunk_overlap, a crawl's
    max_pages and max_depth) and the splitter the chunk sizes came to (fitted to the
    embedding model): `IngestRequest.recorded_options`."""
    added_at: float = 0.0
    files: dict[str, list[Any]] = field(default_factory=dict)
    """Path inside the root → [size, mtime_ns, content hash, settings digest] as last read:
    the sources the root holds, and what lets a check skip hashing an unchanged file."""
    failed: dict[str, list[Any]] = field(default_factory=dict)
    """Path inside the root → [size, mtime_ns, reason] of files that failed last time."""
    skipped: dict[str, list[Any]] = field(default_factory=dict)
    """Path inside the root → [size, mtime_ns, reason] of files found not to be documents
    when read last time (an image without text): an unchanged run need not read them again."""

    @staticmethod
    def make_id(kind: str, location: str) -> str:
        return hashlib.sha256(f"{kind}\0{location}".encode()).hexdigest()[:12]

    @classmethod
    def new(cls, kind: str, location: str, options: dict[str, Any]) -> Root:
        return cls(cls.make_id(kind, location), kind, location, "", dict(options), time.time())

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "location": self.location,
            "label": self.label,
            "options": self.options,
            "added_at": self.added_at,
            "files": packed_records(self.files),
            "failed": packed_records(self.failed),
            "skipped": packed_records(self.skipped),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Root:
        return cls(
            id=data["id"],
            kind=data["kind"],
            location=data["location"],
            label=data.get("label", ""),
            options=dict(data.get("options") or {}),
            added_at=float(data.get("added_at") or 0.0),
            files=unpacked_records(data.get("files")),
            failed=unpacked_records(data.get("failed")),
            skipped=unpacked_records(data.get("skipped")),
        )

    def inside(self, location: str) -> str | None:
        """The path inside this root of a file or folder at `location` ('' for the root
        itself; None if it is not inside). A site's pages are inside it when they are under
        its prefix (the URL's folder, which its crawl keeps to)."""
        if self.kind == "url":
            base = prefix_of(self.location)
            return location[len(base) :] if location.startswith(base) else None
        if location == self.location:
            return Path(location).name if self.kind == "file" else ""
        if self.kind == "folder":
            base = self.location.rstrip(os.sep) + os.sep
            if location.startswith(base):
                return Path(location[len(base) :]).as_posix()
        return None

    def disk_path(self, relative: str = "") -> Path:
        """Where a path inside a folder or file root is on disk."""
        if self.kind == "file":
            return Path(self.location)
        return Path(self.location) / relative if relative else Path(self.location)

    def label_choices(self) -> list[str]:
        """The labels this root can have, shortest first: a folder's or file's name, then
        with its parents (`en`, `docs/en`, …); a site's host, then with its path."""
        if self.kind == "url":
            split = urlsplit(self.location)
            host = split.hostname or "site"
            parts = [p for p in split.path.split("/") if p]
            return [host] + ["/".join([host, *parts[:n]]) for n in range(1, len(parts) + 1)]
        parts = [p for p in Path(self.location).parts if p not in ("/", os.sep)] or ["root"]
        return ["/".join(parts[-n:]) for n in range(1, len(parts) + 1)]


@dataclass(frozen=True)
class Scope:
    """What one path of an ingest run covers: a root, or a part of one (`sub`, a path inside
    it), found at `path` on disk; `root` is None for a path that does not exist."""

    root: str | None
    sub: str
    path: str
    typed: str
    """The path as given, for messages."""

    def covers(self, relative: str) -> bool:
        """Whether a path inside the root is within this scope."""
        return not self.sub or relative == self.sub or relative.startswith(self.sub + "/")


class RootSet:
    """A store's roots, and the names their sources get."""

    def __init__(self, roots: Iterable[Root]) -> None:
        self.roots = list(roots)
        self._owners: dict[str, tuple[Root, str]] | None = None

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> RootSet:
        """The roots a store's metadata records (an entry that is not a root is passed over:
        its sources then show as no root's)."""
        roots = []
        for entry in metadata.get(ROOTS_KEY) or []:
            try:
                root = Root.from_dict(entry)
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            if root.kind in KINDS:
                roots.append(root)
        return cls(roots)

    def to_list(self) -> list[dict[str, Any]]:
        return [r.to_dict() for r in self.roots]

    @property
    def several(self) -> bool:
        return len(self.roots) > 1

    def get(self, root_id: str | None) -> Root | None:
        return next((r for r in self.roots if r.id == root_id), None)

    def name(self, root: Root, relative: str) -> str:
        """The source name of a path inside `root`: unique in the store (a web page's is its
        URL, unique in any store, and a citation that opens)."""
        return self.namer(root)(relative)

    def namer(self, root: Root) -> Callable[[str], str]:
        """`name` for the paths inside one root, made once for all of them (a walk of a
        folder names each of its files)."""
        if root.kind == "url":
            return prefix_of(root.location).__add__
        if not self.several:
            return _itself
        if root.kind == "file":
            return lambda relative: root.label
        return f"{root.label}/".__add__

    def owners(self) -> dict[str, tuple[Root, str]]:
        """Source name → (root, path inside it), for every file the roots hold."""
        if self._owners is None:
            self._owners = {}
            for root in self.roots:
                name = self.namer(root)
                self._owners.update((name(relative), (root, relative)) for relative in root.files)
        return self._owners

    def owner(self, source: str) -> tuple[Root, str, str] | None:
        """The root of a stored source, its file's path inside it, and the record part (''
        or `#id`); None for a source no root records (ingested before roots were kept)."""
        owners = self.owners()
        if source in owners:
            return (*owners[source], "")
        at = source.find("#")
        while at != -1:
            if source[:at] in owners:
                return (*owners[source[:at]], source[at:])
            at = source.find("#", at + 1)
        return None

    def find(self, text: str) -> Root | None:
        """The root a label, a location or a path on disk names (None if none)."""
        for root in self.roots:
            if text in (root.label, root.location, root.id):
                return root
        if "://" not in text:
            location = canonical(text)
            return next((r for r in self.roots if r.location == location), None)
        return None


def _itself(relative: str) -> str:
    return relative


def canonical(path: str) -> str:
    """A path's canonical absolute form (links resolved, `~` expanded)."""
    return str(Path(os.path.expanduser(path)).resolve())


def _conflict(a: str, b: str) -> bool:
    """Whether two labels could make one name: equal, or one a folder of the other (case
    ignored: `Docs` and `docs` are one folder on macOS, and one `--source` to a user)."""
    a, b = a.casefold(), b.casefold()
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def assign_labels(kept: Sequence[Root], new: Sequence[Root]) -> None:
    """Give each new root a label unique among all: its last path component, with more of
    its parents while that is not unique, then `-2`, `-3`… Kept roots keep theirs."""
    fixed = [r.label for r in kept]
    depth = {r.id: 1 for r in new}
    suffix = {r.id: 0 for r in new}

    def label(root: Root) -> str:
        text = root.label_choices()[depth[root.id] - 1]
        return f"{text}-{suffix[root.id] + 1}" if suffix[root.id] else text

    for _ in range(1000):
        labels = {r.id: label(r) for r in new}
        clashing = [
            r
            for r in new
            if any(_conflict(labels[r.id], f) for f in fixed)
            or any(o.id != r.id and _conflict(labels[r.id], labels[o.id]) for o in new)
        ]
        if not clashing:
            break
        growable = [r for r in clashing if depth[r.id] < len(r.label_choices())]
        if growable:
            for r in growable:
                depth[r.id] += 1
            continue
        # No parents left to tell them apart: the first keeps its label, the others count up.
        for i, r in enumerate(clashing):
            if i > 0 or any(_conflict(labels[r.id], f) for f in fixed):
                suffix[r.id] += 1
    for r in new:
        r.label = label(r)


@dataclass
class Resolution:
    """The roots after a run's paths are resolved against a store's roots."""

    roots: RootSet
    scopes: list[Scope]
    new: list[Root]
    absorbed: dict[str, tuple[str, str]]
    """Roots inside a folder added now: their id → (the new root's id, their path in it)."""
    renamed: dict[str, str] = field(default_factory=dict)
    """The stored sources renamed for these roots: old name → new name."""


def resolve(
    paths: Sequence[str],
    before: RootSet,
    options: dict[str, Any],
    is_url: Callable[[str], bool] | None = None,
) -> Resolution:
    """Resolve a run's paths against the store's roots: a path inside a recorded folder (or
    a recorded file) is part of that root; any other becomes a new root, taking in the roots
    inside it. A root given as a whole gets this run's options."""
    roots = [
        replace(r, files=dict(r.files), failed=dict(r.failed), skipped=dict(r.skipped))
        for r in before.roots
    ]
    scopes: list[Scope] = []
    new: list[Root] = []
    absorbed: dict[str, tuple[str, str]] = {}
    for typed in paths:
        url = is_url(typed) if is_url else "://" in typed
        location = typed if url else canonical(typed)
        owner = next(
            (
                (r, rel)
                for r in sorted(roots, key=lambda r: -len(r.location))
                if (rel := r.inside(location)) is not None
            ),
            None,
        )
        if owner is not None:
            root, rel = owner
            sub = "" if root.kind == "file" else rel
            if sub == "":
                root.options = dict(options)
            scopes.append(Scope(root.id, sub, location, typed))
            continue
        if not url and not os.path.lexists(location):
            scopes.append(Scope(None, "", location, typed))
            continue
        kind = "url" if url else ("folder" if Path(location).is_dir() else "file")
        root = Root.new(kind, location, options)
        if kind == "folder":
            for inner in [r for r in roots if r.kind != "url"]:
                rel = root.inside(inner.location)
                if rel is None:
                    continue
                absorbed[inner.id] = (root.id, rel)
                for relative, entry in inner.files.items():
                    key = rel if inner.kind == "file" else f"{rel}/{relative}"
                    root.files[key] = entry
                for relative, entry in inner.failed.items():
                    key = rel if inner.kind == "file" else f"{rel}/{relative}"
                    root.failed[key] = entry
                roots.remove(inner)
                if inner in new:
                    new.remove(inner)
                scopes = [
                    Scope(
                        root.id,
                        rel if inner.kind == "file" else "/".join(x for x in (rel, s.sub) if x),
                        s.path,
                        s.typed,
                    )
                    if s.root == inner.id
                    else s
                    for s in scopes
                ]
        roots.append(root)
        new.append(root)
        scopes.append(Scope(root.id, "", location, typed))
    assign_labels([r for r in roots if r not in new], new)
    return Resolution(RootSet(roots), scopes, new, absorbed)


def renames_for(sources: Iterable[str], before: RootSet, after: Resolution) -> dict[str, str]:
    """The stored sources whose names change when `before`'s roots become `after`'s (a root
    added beside a single one gets its label; roots taken in get the new root's)."""
    renames: dict[str, str] = {}
    for source in sources:
        found = before.owner(source)
        if found is None:
            continue
        root, relative, record = found
        target = after.roots.get(root.id)
        if target is None and root.id in after.absorbed:
            into, rel = after.absorbed[root.id]
            target = after.roots.get(into)
            relative = rel if root.kind == "file" else f"{rel}/{relative}"
        if target is None:
            continue
        name = after.roots.name(target, relative) + record
        if name != source:
            renames[source] = name
    return renames


def relative_to(sub: str, relative: str) -> str:
    """`relative` (a path inside a folder given at `sub` inside its root) inside the root."""
    return str(PurePosixPath(sub) / relative) if sub else relative


def _digests(request: IngestRequest) -> dict[bool, str]:
    """The settings digest of a run's files: {holds records: digest}."""
    from archivist.ingest.sync import settings_digest

    return {
        False: settings_digest(request.splitter, None),
        True: settings_digest(request.splitter, request.loader),
    }


def prepare_roots(
    store: RootsStore, request: IngestRequest
) -> tuple[Resolution, list[SourceFile], list[Failure], list[Failure]]:
    """Resolve a run's paths against the roots `store` records, discover their files, and
    give stored sources the names the roots now call for (a rename cut short is finished
    first); record the roots. Return the resolution, the files to ingest (named), the
    failures and the files skipped."""
    info = store.info()
    pending = info.get(RENAMING_KEY)
    if pending:
        _rename(store, pending)
        info = store.info()
    before = RootSet.of(info)
    resolution = resolve(request.paths, before, request.recorded_options())
    files, failed, skipped = discover_scopes(resolution, request)
    held = store.source_names() if store.exists() else []
    check_included(resolution, before, request.folder_rules.include, files, failed, skipped)
    renames = renames_for(held, before, resolution)
    renames.update(unowned_renames(held, before, renames, files))
    # A new name already taken (by a source no root records) is left alone.
    taken = set(held) - set(renames)
    renames = {old: new for old, new in renames.items() if new not in taken}
    if renames:
        store.annotate(**{ROOTS_KEY: resolution.roots.to_list(), RENAMING_KEY: renames})
        _rename(store, renames)
    elif resolution.roots.to_list() != before.to_list():
        store.annotate(**{ROOTS_KEY: resolution.roots.to_list()})
    resolution.renamed = renames
    return resolution, files, failed, skipped


class NothingIncluded(ArchivistError):
    """A run's --include patterns match no file in its folders."""


def check_included(
    resolution: Resolution,
    recorded: RootSet,
    include: Sequence[str],
    files: Sequence[Any],
    failed: Sequence[Any],
    skipped: Sequence[Any],
) -> None:
    """Refuse a run whose `include` patterns match no file in its folders, before anything
    is created or recorded: the patterns are relative to each folder, and a path written from
    elsewhere matches nothing. Patterns a folder's root already records (`recorded`) go on:
    a sync whose matching files were all deleted removes their sources."""
    from archivist.ingest.discovery import NOT_INCLUDED

    if not include or files or failed:
        return
    # Reasons a file is left out before --include is asked about it.
    before = ("hidden file", "excluded by --exclude", NOT_INCLUDED)
    if any(not s.source.endswith("/") and s.reason not in before for s in skipped):
        return  # matched, then left out for another reason (ignored, not a document)
    folders = [sc for sc in resolution.scopes if sc.root and os.path.isdir(sc.path)]
    if not folders:
        return
    for scope in folders:
        root = recorded.get(scope.root)
        if root is not None and root.options.get("include") == list(include):
            return
    where = ", ".join(sc.path for sc in folders)
    inside = [_from_inside(p, folders) for p in include]
    fix = "Write them from inside it (e.g. 'guides/*.md')"
    if inside != list(include):
        fix = f"Write them from inside it: {_options(inside)}"
    raise NothingIncluded(
        f"{_options(include)} matched no file in {where}: the patterns are relative to the folder "
        "ingested. Nothing was stored.",
        f"{fix}, or start one with '**/' to match at any depth.",
    )


def _options(patterns: Sequence[str]) -> str:
    return " ".join(f"--include '{p}'" for p in patterns)


def _from_inside(pattern: str, folders: Sequence[Scope]) -> str:
    """A pattern written from a folder's parent (`components/button/*.md` for the folder
    `components`), written from inside it (`button/*.md`); else as it is."""
    for scope in folders:
        name = Path(scope.path).name
        if pattern.startswith(name + "/"):
            return pattern[len(name) + 1 :]
    return pattern


def discover_scopes(
    resolution: Resolution, request: IngestRequest
) -> tuple[list[SourceFile], list[Failure], list[Failure]]:
    """The files of a run's scopes on disk (not its sites: the crawler reads those), named
    for their roots; return them, the failures and the files skipped."""
    found, failed, skipped = scan_scopes(resolution, request)
    return [file.file() for file in found], failed, skipped


def scan_scopes(
    resolution: Resolution, request: IngestRequest
) -> tuple[list[FoundFile], list[Failure], list[Failure]]:
    """As `discover_scopes`, each file as the walk found it (a path, a size and a time, to
    compare with what a root records), not yet a SourceFile to read."""
    from archivist.ingest.discovery import Failure, discover_one, source_name

    files: dict[str, FoundFile] = {}
    failed: list[Failure] = []
    skipped: list[Failure] = []
    for scope in resolution.scopes:
        root = resolution.roots.get(scope.root)
        if root is not None and root.kind == "url":
            continue  # read by the crawler
        path = Path(scope.path)
        if root is None or not os.path.lexists(path):
            failed.append(Failure(source_name(scope.typed), "no such file or folder"))
            continue
        relative = Path(root.location).name if root.kind == "file" else scope.sub
        naming = resolution.roots.namer(root)
        discover_one(
            path, relative, naming, root.id, request.loader, request.folder_rules,
            files, failed, skipped,
        )  # fmt: skip
    return list(files.values()), failed, skipped


def url_roots(resolution: Resolution) -> list[Root]:
    """The sites a run crawls: the URL roots its paths name, each once."""
    found: dict[str, Root] = {}
    for scope in resolution.scopes:
        root = resolution.roots.get(scope.root)
        if root is not None and root.kind == "url":
            found.setdefault(root.id, root)
    return list(found.values())


def page_files(sites: Sequence[Root], files: Iterable[SourceFile]) -> list[SourceFile]:
    """The crawled pages (files of the web cache named by their URLs) as files of their
    sites: each with its root, its path inside it, and its cached file's size and time."""
    from archivist.ingest.discovery import SourceFile

    placed = []
    for file in files:
        owner = max(
            (r for r in sites if r.inside(file.source) is not None),
            key=lambda r: len(prefix_of(r.location)),
            default=None,
        )
        if owner is None:
            placed.append(file)
            continue
        try:
            info = file.path.stat()
            size, mtime = info.st_size, info.st_mtime_ns
        except OSError:
            size, mtime = -1, -1
        relative = owner.inside(file.source) or ""
        placed.append(SourceFile(file.path, file.source, owner.id, relative, size, mtime))
    return placed


def unowned_renames(
    held: Sequence[str],
    before: RootSet,
    renames: dict[str, str],
    files: Iterable[SourceFile | FoundFile],
) -> dict[str, str]:
    """Sources no root records (a store made before roots were kept), given to the files of
    this run whose path inside their root is their name: renamed where that file's name
    differs (a store of several roots), the first file in the order given winning."""
    unowned = {s for s in held if s not in renames and before.owner(s) is None}
    if not unowned:
        return {}
    records: dict[str, list[str]] = {}
    for name in unowned:
        at = name.find("#")
        while at != -1:
            records.setdefault(name[:at], []).append(name)
            at = name.find("#", at + 1)
    found: dict[str, str] = {}
    for file in files:
        candidates = [file.relative] if file.relative in unowned else []
        if file.has_records:
            candidates += records.get(file.relative, [])
        for name in candidates:
            unowned.discard(name)
            new = file.source + name[len(file.relative) :]
            if new != name:
                found[name] = new
    return found


def cached_hashes(
    roots: RootSet, files: Iterable[SourceFile | FoundFile], request: IngestRequest
) -> dict[str, str]:
    """The content hashes of files unchanged since they were last read (the same size,
    modification time and settings), by source: these files need not be hashed again."""
    cached: dict[str, str] = {}
    digests = _digests(request)
    recorded = {root.id: root.files for root in roots.roots}
    for file in files:
        entries = recorded.get(file.root)
        entry = entries.get(file.relative) if entries is not None else None
        if (
            entry
            and len(entry) >= 4
            and file.size >= 0
            and entry[0] == file.size
            and entry[1] == file.mtime_ns
            and entry[3] == digests[file.has_records]
        ):
            cached[file.source] = entry[2]
    return cached


def record_run(store: RootsStore, state: Mapping[str, Any]) -> None:
    """Record what an ingest run read of its roots (in the store's metadata): each file's
    size, modification time and hash, failures and their reasons, the sources removed."""
    request = state["request"]
    roots = RootSet.of({ROOTS_KEY: state.get("roots", [])})
    recorded = RootSet.of(store.info()).roots
    current = {r.id: r for r in recorded}
    for root in roots.roots:
        if root.id in current:  # another run (a shard elsewhere) may have recorded more
            root.files = {**current[root.id].files, **root.files}
            root.failed = {**current[root.id].failed, **root.failed}
    gone = [found for s in state.get("removed", []) if (found := roots.owner(s)) is not None]
    hashes = dict(state.get("hashes", []))
    failed = {f["source"]: f["reason"] for f in state.get("failed", [])}
    not_documents = {f["source"]: f["reason"] for f in state.get("skipped", [])}
    settled = set(state.get("settled", []))
    seen: set[tuple[str, str]] = set()
    digests = _digests(request)
    for file in state.get("files", []):
        root = roots.get(file.root)
        if root is None:
            continue
        seen.add((root.id, file.relative))
        if file.source in not_documents:  # read, and found not to be a document
            root.skipped[file.relative] = [file.size, file.mtime_ns, not_documents[file.source]]
        else:
            root.skipped.pop(file.relative, None)
        if file.source in failed:
            root.failed[file.relative] = [file.size, file.mtime_ns, failed[file.source]]
        elif file.source in settled and file.source in hashes:
            entry = [file.size, file.mtime_ns, hashes[file.source], digests[file.has_records]]
            root.files[file.relative] = entry
            root.failed.pop(file.relative, None)
    for root, relative, record in gone:
        if not record:
            root.files.pop(relative, None)
    scopes = [Scope(r, sub, "", "") for r, sub in state.get("scopes", [])]
    for root in roots.roots:
        for kept in (root.failed, root.skipped):
            for relative in list(kept):
                covered = any(s.root == root.id and s.covers(relative) for s in scopes)
                if covered and (root.id, relative) not in seen:
                    del kept[relative]  # no longer there
    if roots.roots != recorded:  # nothing changed: nothing written
        store.annotate(**{ROOTS_KEY: roots.to_list()})


def root_sources(roots: RootSet, root: Root, names: Iterable[str]) -> list[str]:
    """The stored sources of `root`: those its files are, and, in a store of several roots,
    any other named under its label."""
    found = []
    for name in names:
        owner = roots.owner(name)
        if owner is not None:
            if owner[0].id == root.id:
                found.append(name)
        elif roots.several and (
            name.startswith(root.label + "/")
            if root.kind != "file"
            else name == root.label or name.startswith(root.label + "#")
        ):
            found.append(name)
    return found


def remove_root(store: RootsStore, root: Root) -> tuple[int, dict[str, str]]:
    """Remove a root and every source of it from `store`; the other sources get the names the
    remaining roots call for (a store left with one root drops the labels). Return the chunks
    removed and the renames."""
    before = RootSet.of(store.info())
    names = store.source_names()
    removed = sum(store.delete_source(name) for name in root_sources(before, root, names))
    after = Resolution(RootSet(r for r in before.roots if r.id != root.id), [], [], {})
    renames = renames_for(store.source_names(), before, after)
    store.annotate(**{ROOTS_KEY: after.roots.to_list(), RENAMING_KEY: renames})
    _rename(store, renames)
    return removed, renames


def _rename(store: RootsStore, renames: dict[str, str]) -> None:
    """Rename stored sources a layer at a time, recording after each what is left to do, so
    that a rename cut short is finished, never done twice."""
    from archivist.tools.catalog import rename_layers

    left = dict(renames)
    for layer in rename_layers(renames):
        store.rename_sources({old: renames[old] for old in layer})
        for old in layer:
            del left[old]
        store.annotate(**{RENAMING_KEY: left})
