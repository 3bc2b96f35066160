"""Find the files to ingest under files and folders, as people have them: hidden folders,
dependency folders and what `.gitignore`/`.archivistignore` ignore are left out, `--include`
and `--exclude` globs choose, and every file left out is reported with its reason."""

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from archivist.ingest.loaders import (
    RECORD_FORMATS,
    LoaderOptions,
    skip_reason,
    suffix_of,
    supported,
)

IGNORE_FILES = (".gitignore", ".archivistignore")
DEPENDENCY_FOLDERS = frozenset(
    {"node_modules", "bower_components", "jspm_packages", "__pycache__", "site-packages"}
)


NOT_INCLUDED = "not matched by --include"
"""Why a file a folder holds is left out when --include patterns are given."""


@dataclass
class Failure:
    """A file that could not be ingested (or was skipped), and why."""

    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


@dataclass(frozen=True)
class FolderRules:
    """Which files of a folder are ingested, besides their type."""

    include: tuple[str, ...] = ()
    """Globs (gitignore syntax, on the path relative to the folder): only matching files."""
    exclude: tuple[str, ...] = ()
    """Globs of files and folders left out."""
    ignore_files: bool = True
    """Respect `.gitignore` and `.archivistignore` files found in the folders."""


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest and the `source` name its chunks get."""

    path: Path
    source: str
    root: str = ""
    """The id of the store's root the file belongs to ('' when not told)."""
    relative: str = ""
    """Its path inside that root ('' when not told: then its source name is that path)."""
    size: int = -1
    """Its size and modification time (ns) when it was found, before it was read."""
    mtime_ns: int = -1
    folder: Path | None = None
    """The folder it was found in, which its include directives may read from (None: a file
    given directly, whose own folder they may read from)."""

    has_records: bool = field(init=False, repr=False, compare=False)
    """Whether the file holds records, each of which may be its own source `file#id`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "has_records", suffix_of(self.path) in RECORD_FORMATS)

    def owns(self, source: str) -> bool:
        """Whether a stored source came from this file (the file itself or one of its records)."""
        return source == self.source or (self.has_records and source.startswith(self.source + "#"))


class FoundFile(NamedTuple):
    """A file found to ingest, as a walk finds it: its `SourceFile`'s fields, its path a
    string. A sync compares each of a folder's files with what the store recorded of it, and
    builds neither a Path nor a SourceFile for one that has not changed."""

    path: str
    source: str
    root: str
    relative: str
    size: int
    mtime_ns: int
    folder: Path | None
    has_records: bool

    def file(self) -> SourceFile:
        """The file to read."""
        return SourceFile(Path(self.path), *self[1:7])


def source_name(relative: str) -> str:
    """A file's source name: its relative path, with bytes that are not UTF-8 (a name from an
    old archive or a Windows share) written as `\\xe9` escapes, so the name can be stored,
    printed and hashed."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(relative).decode("utf-8", errors="backslashreplace")
    return relative


Naming = Callable[[str], str]
"""Turns a file's path inside the folder walked into its source name."""


def _same(relative: str) -> str:
    return relative


def discover(
    paths: list[Path], options: LoaderOptions | None = None, rules: FolderRules | None = None
) -> tuple[list[SourceFile], list[Failure], list[Failure]]:
    """List the files under `paths`: (files to ingest, failures, files skipped with a reason).

    A file given directly is named by its file name; a file found in a folder by its path
    relative to that folder, with `/` separators. Hidden files and folders, dependency folders
    (node_modules, a virtualenv) and ignored files are skipped, each reported once (a folder
    as `name/`). Inside a folder, a symbolic link is followed only to a file in that same
    folder: a link leading out of it (or nowhere, or in a loop) is reported, never read, and
    so are devices, sockets and pipes (reading a pipe would wait forever).
    """
    options = options or LoaderOptions()
    rules = rules or FolderRules()
    files: dict[str, FoundFile] = {}
    failed: list[Failure] = []
    skipped: list[Failure] = []
    for root in paths:
        discover_one(
            root,
            root.name if root.is_file() else "",
            _same,
            "",
            options,
            rules,
            files,
            failed,
            skipped,
        )
    return [found.file() for found in files.values()], failed, skipped


def discover_one(
    path: Path,
    relative: str,
    naming: Naming,
    root: str,
    options: LoaderOptions,
    rules: FolderRules,
    files: dict[str, FoundFile],
    failed: list[Failure],
    skipped: list[Failure],
) -> None:
    """Add what one file or folder holds to `files`, `failed` and `skipped`. `relative` is
    its path inside the store's root `root` (for a folder: '' if it is the root itself); a
    file is named `naming(its path inside the root)`."""
    if path.is_file():
        relative = source_name(relative)
        name = naming(relative)
        if supported(path, options):
            size, mtime = _stat_of(path)
            records = suffix_of(path) in RECORD_FORMATS
            found = FoundFile(os.fspath(path), name, root, relative, size, mtime, None, records)
            files.setdefault(name, found)
        else:
            skipped.append(Failure(name, skip_reason(path)))
    elif path.is_dir():
        _walk(path, options, rules, files, failed, skipped, naming, root, relative)
    else:
        failed.append(Failure(source_name(str(path)), _not_a_file(path)))


def _stat_of(path: Path) -> tuple[int, int]:
    try:
        found = path.stat()
    except OSError:
        return -1, -1
    return found.st_size, found.st_mtime_ns


def _walk(
    root: Path,
    options: LoaderOptions,
    rules: FolderRules,
    files: dict[str, FoundFile],
    failed: list[Failure],
    skipped: list[Failure],
    naming: Naming = _same,
    root_id: str = "",
    sub: str = "",
) -> None:
    """Walk a folder top-down, each folder's entries in name order (its sub-folders left out
    or kept, then its files, then each kept sub-folder in turn), as `os.walk` would, but with
    one `os.scandir` per folder and one `lstat` per file, from its DirEntry: a folder of
    100,000 unchanged files is listed at the speed of the disk's own listing."""
    inside = root.resolve()
    chosen = _Globs(rules.include) if rules.include else None
    excluded = _Globs(rules.exclude) if rules.exclude else None
    top = os.fspath(root)
    kind = _Kinds(options)
    # Folders still to walk, the next one last: (its path, its path inside `root`, the
    # ignore files that apply to it).
    pending: list[tuple[str, str, list[tuple[str, object, str]]]] = [(top, "", [])]
    while pending:
        folder, rel_folder, active = pending.pop()
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=_name_of)
        except OSError:
            continue  # gone, or not readable: passed over, as os.walk does
        dirs, plain = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir()  # a link to a folder counts as a folder, unfollowed
            except OSError:
                is_dir = False
            (dirs if is_dir else plain).append(entry)
        if rules.ignore_files and plain:
            active = active + _read_ignore_files(folder, rel_folder, plain)
        base = f"{sub}/{rel_folder}" if sub and rel_folder else sub or rel_folder
        kept = []
        for entry in dirs:
            name = entry.name
            rel = f"{rel_folder}/{name}" if rel_folder else name
            path = entry.path
            reason = None
            if name.startswith("."):
                reason = "hidden folder"
            elif name in DEPENDENCY_FOLDERS or os.path.isfile(f"{path}/pyvenv.cfg"):
                reason = "dependency folder (node_modules, a virtualenv…)"
            elif excluded and excluded.match(rel, folder=True):
                reason = "excluded by --exclude"
            elif found := _ignored(active, rel, folder=True):
                reason = f"ignored by {found}"
            if reason:
                where = f"{base}/{name}" if base else name
                skipped.append(Failure(naming(source_name(where)) + "/", reason))
            elif entry.is_symlink():
                # A linked folder is not walked into; say so when it matters.
                if problem := _link_problem(Path(path), inside):
                    where = f"{base}/{name}" if base else name
                    failed.append(Failure(naming(source_name(where)), problem))
            else:
                kept.append((path, rel, active))
        pending.extend(reversed(kept))
        for entry in plain:
            name = entry.name
            rel = f"{rel_folder}/{name}" if rel_folder else name
            relative = source_name(f"{base}/{name}" if base else name)
            source = naming(relative)
            reason = None
            if name.startswith("."):
                reason = "hidden file"
            elif excluded and excluded.match(rel):
                reason = "excluded by --exclude"
            elif chosen and not chosen.match(rel):
                reason = NOT_INCLUDED
            elif active and (found := _ignored(active, rel)):
                reason = f"ignored by {found}"
            if reason:
                skipped.append(Failure(source, reason))
            elif isinstance(info := _entry_stat(entry, inside), str):
                failed.append(Failure(source, info))
            elif (records := kind(name, entry.path)) is not None:
                if source not in files:
                    files[source] = FoundFile(
                        entry.path, source, root_id, relative, info.st_size, info.st_mtime_ns,
                        root, records,
                    )  # fmt: skip
            else:
                skipped.append(Failure(source, skip_reason(Path(entry.path))))


def _name_of(entry: os.DirEntry) -> str:
    return entry.name


class _Kinds:
    """What a file is to the loaders, asked once per extension: None if it has no loader,
    else whether it holds records. Without named loaders (whose patterns may match a whole
    path) that is the extension's."""

    def __init__(self, options: LoaderOptions) -> None:
        self.options = options
        self.by_suffix: dict[str, bool | None] | None = None if options.extra_loaders else {}

    def __call__(self, name: str, path: str) -> bool | None:
        suffix = suffix_of(name)
        if self.by_suffix is None:
            return self._kind(suffix, path)
        if suffix not in self.by_suffix:
            self.by_suffix[suffix] = self._kind(suffix, path)
        return self.by_suffix[suffix]

    def _kind(self, suffix: str, path: str) -> bool | None:
        return suffix in RECORD_FORMATS if supported(path, self.options) else None


def _spec(lines: "list[str] | tuple[str, ...]"):
    """Compile gitignore patterns for RE2, whose matching time is linear in the path: Python's
    own engine backtracks, and a pattern of a few dozen stars took hours on one file name."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines, backend="re2")


class _Globs:
    """Gitignore-style globs matched on a path relative to the ingested folder."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.spec = _spec(patterns)

    def match(self, relative: str, folder: bool = False) -> bool:
        return self.spec.match_file(relative + "/" if folder else relative)


def _read_ignore_files(
    folder: str, rel_folder: str, entries: list[os.DirEntry]
) -> list[tuple[str, object, str]]:
    """The ignore files among a folder's entries, compiled once: (the folder's path inside
    the walked one, its rules, the file's path for messages) each."""
    names = {entry.name for entry in entries if entry.name in IGNORE_FILES}
    found = []
    for name in IGNORE_FILES:
        if name not in names:
            continue
        try:
            with open(f"{folder}/{name}", encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        spec = _spec(lines)
        where = f"{rel_folder}/{name}" if rel_folder else name
        found.append((rel_folder, spec, where))
    return found


def _ignored(active: list[tuple[str, object, str]], relative: str, folder: bool = False) -> str:
    """The ignore file that leaves a path out ('' if none): each file's patterns are relative
    to its own folder, and a deeper file's `!pattern` takes a path back in."""
    verdict = ""
    for base, spec, where in active:
        inner = relative[len(base) + 1 :] if base else relative
        result = spec.check_file(inner + "/" if folder else inner)
        if result.include is True:
            verdict = where
        elif result.include is False:
            verdict = ""
    return verdict


_SPECIAL = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe (FIFO)"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_a_file(path: Path) -> str:
    """Why a path given directly is neither a file nor a folder to read: it does not exist,
    or it is a device, pipe or socket (never read: /dev/zero never ends, a pipe may never
    send anything)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file or folder"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    kind = next((name for test, name in _SPECIAL if test(mode)), "not a regular file")
    return f"{kind}, not a file: not read"


def escaped(file: SourceFile) -> str | None:
    """Why a file found in a folder is no longer to be read there: a symbolic link on its
    path now leads out of the folder (swapped since the folder was walked), or nowhere."""
    if file.folder is None:
        return None
    try:
        target = file.path.resolve(strict=True)
    except (OSError, RuntimeError):
        return None  # gone or looping: reading it says so
    if target.is_relative_to(file.folder.resolve()):
        return None
    return "symbolic link now leads outside the folder, not read (changed while it was read?)"


def _link_problem(path: Path, inside: Path) -> str | None:
    """Why a symbolic link is not followed: it leads nowhere, in a loop, or out of `inside`."""
    try:
        target = path.resolve(strict=True)
    except RuntimeError:
        return "symbolic link loop"
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "symbolic link loop"
        return "broken symbolic link (its target does not exist)"
    if not target.is_relative_to(inside):
        return "symbolic link to outside the folder, not followed (ingest its target directly)"
    return None


def _entry_stat(entry: os.DirEntry, inside: Path) -> os.stat_result | str:
    """A file found in a folder: its status if it is a regular file to read, else why it is
    not read. One system call for a plain file, the commonest case by far (the DirEntry's
    own lstat, which it keeps)."""
    try:
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            if reason := _link_problem(Path(entry.path), inside):
                return reason
            info = os.stat(entry.path)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return "not a regular file (a pipe, socket or device)"
    return info
