"""Find the files to ingest under files and folders, as people have them: hidden folders,
dependency folders and what `.gitignore`/`.archivistignore` ignore are left out, `--include`
and `--exclude` globs choose, and every file left out is reported with its reason."""

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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
    files: dict[str, SourceFile] = {}
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
    return list(files.values()), failed, skipped


def discover_one(
    path: Path,
    relative: str,
    naming: Naming,
    root: str,
    options: LoaderOptions,
    rules: FolderRules,
    files: dict[str, SourceFile],
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
            files.setdefault(name, SourceFile(path, name, root, relative, size, mtime))
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
    files: dict[str, SourceFile],
    failed: list[Failure],
    skipped: list[Failure],
    naming: Naming = _same,
    root_id: str = "",
    sub: str = "",
) -> None:
    inside = root.resolve()
    chosen = _Globs(rules.include) if rules.include else None
    excluded = _Globs(rules.exclude) if rules.exclude else None
    ignores: dict[str, list[tuple[str, object, str]]] = {}
    top = os.fspath(root)
    for folder, dirnames, filenames in os.walk(top):
        here = Path(folder)
        rel_folder = os.path.relpath(folder, top).replace(os.sep, "/")
        rel_folder = "" if rel_folder == "." else rel_folder
        active = list(ignores.get(rel_folder, []))
        if rules.ignore_files:
            active += _read_ignore_files(here, rel_folder, filenames)

        def prefix(name: str, folder: str = rel_folder) -> str:
            return f"{folder}/{name}" if folder else name

        kept_dirs = []
        for name in sorted(dirnames):
            rel = prefix(name)
            path = here / name
            reason = None
            if name.startswith("."):
                reason = "hidden folder"
            elif name in DEPENDENCY_FOLDERS or (path / "pyvenv.cfg").is_file():
                reason = "dependency folder (node_modules, a virtualenv…)"
            elif excluded and excluded.match(rel, folder=True):
                reason = "excluded by --exclude"
            elif found := _ignored(active, rel, folder=True):
                reason = f"ignored by {found}"
            if reason:
                skipped.append(
                    Failure(naming(source_name(f"{sub}/{rel}" if sub else rel)) + "/", reason)
                )
                continue
            # os.walk does not descend into linked folders; say so when it matters.
            if path.is_symlink() and (problem := _link_problem(path, inside)):
                failed.append(Failure(naming(source_name(f"{sub}/{rel}" if sub else rel)), problem))
            kept_dirs.append(name)
            ignores[rel] = active
        dirnames[:] = kept_dirs
        for name in sorted(filenames):
            rel = prefix(name)
            relative = source_name(f"{sub}/{rel}" if sub else rel)
            source = naming(relative)
            full = f"{folder}/{name}"
            reason = None
            if name.startswith("."):
                reason = "hidden file"
            elif excluded and excluded.match(rel):
                reason = "excluded by --exclude"
            elif chosen and not chosen.match(rel):
                reason = NOT_INCLUDED
            elif found := _ignored(active, rel):
                reason = f"ignored by {found}"
            if reason:
                skipped.append(Failure(source, reason))
            elif problem := _entry_problem(full, inside, stats := []):
                failed.append(Failure(source, problem))
            elif supported(full, options):
                size, mtime = stats[0] if stats else (-1, -1)
                files.setdefault(
                    source, SourceFile(here / name, source, root_id, relative, size, mtime, root)
                )
            else:
                skipped.append(Failure(source, skip_reason(here / name)))


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
    folder: Path, rel_folder: str, filenames: list[str]
) -> list[tuple[str, object, str]]:
    found = []
    for name in IGNORE_FILES:
        if name not in filenames:
            continue
        try:
            lines = (folder / name).read_text(encoding="utf-8", errors="replace").splitlines()
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


def _entry_problem(path: str, inside: Path, found: list | None = None) -> str | None:
    """Why a file found in a folder is not read, or None if it is a regular file to read
    (then its size and modification time are added to `found`)."""
    try:
        info = os.lstat(path)  # one system call for a plain file, the commonest case by far
        if stat.S_ISLNK(info.st_mode):
            if reason := _link_problem(Path(path), inside):
                return reason
            info = os.stat(path)
        mode = info.st_mode
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return "not a regular file (a pipe, socket or device)"
    if found is not None:
        found.append((info.st_size, info.st_mtime_ns))
    return None
