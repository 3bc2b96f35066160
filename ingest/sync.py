"""Find source files, name them, hash them, and turn them into documents of chunks."""

import errno
import functools
import hashlib
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from archivist.ingest.loaders import (
    RECORD_FORMATS,
    LoaderOptions,
    LoadError,
    Section,
    check_size,
    load,
    skip_reason,
    supported,
)
from archivist.ingest.splitter import SplitterSettings, split_text
from archivist.tools.errors import ArchivistError
from archivist.tools.store import Chunk

SHARD_FORMAT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class SourceFile:
    """A file to ingest and the `source` name its chunks get."""

    path: Path
    source: str

    @property
    def has_records(self) -> bool:
        """Whether the file holds records, each of which may be its own source `file#id`."""
        return self.path.suffix.lower() in RECORD_FORMATS

    def owns(self, source: str) -> bool:
        """Whether a stored source came from this file (the file itself or one of its records)."""
        return source == self.source or (self.has_records and source.startswith(self.source + "#"))


@dataclass(frozen=True)
class Shard:
    """Part `index` of `count` disjoint parts of a corpus (1-based, as in `--shard 2/3`).

    A source belongs to the part chosen by a stable hash of its name: the first 8 bytes of
    its UTF-8 BLAKE2b digest, big-endian, modulo `count`, plus one. The same source lands in
    the same part on every machine and every run (Python's own `hash()` is salted per process).
    """

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """Read `i/N` (1 ≤ i ≤ N), or raise with the expected form."""
        match = SHARD_FORMAT.match(text)
        index, count = (int(match[1]), int(match[2])) if match else (0, 0)
        if not match or count < 1 or not 1 <= index <= count:
            raise ArchivistError(
                f"'{text}' is not a shard.",
                "Give --shard as i/N with 1 ≤ i ≤ N, e.g. --shard 1/3, --shard 2/3 and "
                "--shard 3/3 on three machines.",
            )
        return cls(index, count)

    def owns(self, source: str) -> bool:
        """Whether `source` belongs to this part."""
        digest = hashlib.blake2b(source.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big") % self.count == self.index - 1

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass
class Failure:
    """A file that could not be ingested, and why."""

    source: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"source": self.source, "reason": self.reason}


@dataclass
class Document:
    """One source's new version: its content hash and its chunks."""

    source: str
    doc_hash: str
    chunks: list[Chunk]


def discover(paths: list[Path]) -> tuple[list[SourceFile], list[Failure], list[Failure]]:
    """List the files under `paths`: (files to ingest, failures, files skipped by type).

    A file given directly is named by its file name; a file found in a folder by its path
    relative to that folder, with `/` separators. Hidden files and folders are left out.
    Inside a folder, a symbolic link is followed only to a file in that same folder: a link
    leading out of it (or nowhere, or in a loop) is reported, never read, and so are devices,
    sockets and pipes (reading a pipe would wait forever).
    """
    files: dict[str, SourceFile] = {}
    failed: list[Failure] = []
    skipped: list[Failure] = []
    for root in paths:
        if root.is_file():
            if supported(root):
                files.setdefault(root.name, SourceFile(root, root.name))
            else:
                skipped.append(Failure(root.name, skip_reason(root)))
        elif root.is_dir():
            inside = root.resolve()
            for folder, dirnames, filenames in os.walk(root):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                for name in dirnames:
                    path = Path(folder) / name
                    # os.walk does not descend into linked folders; say so when it matters.
                    if path.is_symlink() and (reason := _link_problem(path, inside)):
                        failed.append(Failure(path.relative_to(root).as_posix(), reason))
                for name in sorted(filenames):
                    if name.startswith("."):
                        continue
                    path = Path(folder) / name
                    source = path.relative_to(root).as_posix()
                    if reason := _entry_problem(path, inside):
                        failed.append(Failure(source, reason))
                    elif supported(path):
                        files.setdefault(source, SourceFile(path, source))
                    else:
                        skipped.append(Failure(source, skip_reason(path)))
        else:
            failed.append(Failure(str(root), "no such file or folder"))
    return list(files.values()), failed, skipped


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


def _entry_problem(path: Path, inside: Path) -> str | None:
    """Why a file found in a folder is not read, or None if it is a regular file to read."""
    if path.is_symlink() and (reason := _link_problem(path, inside)):
        return reason
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if not stat.S_ISREG(mode):
        return "not a regular file (a pipe, socket or device)"
    return None


def _settings_digest(splitter: SplitterSettings, options: LoaderOptions | None) -> "hashlib._Hash":
    return _digest_of_settings(splitter, options).copy()


@functools.lru_cache(maxsize=16)
def _digest_of_settings(
    splitter: SplitterSettings, options: LoaderOptions | None
) -> "hashlib._Hash":
    settings = {"splitter": splitter.as_dict()}
    if options is not None:
        settings["loader"] = options.as_dict()
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode())


def content_hash(
    path: Path, splitter: SplitterSettings, options: LoaderOptions | None = None
) -> str:
    """Hash a file's bytes with the settings that shape its chunks: a change of either means
    re-chunking."""
    check_size(path)  # before reading: a huge file is refused without hashing it
    digest = _settings_digest(splitter, options)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_hash(section: Section, splitter: SplitterSettings, options: LoaderOptions) -> str:
    """Hash one record's text and metadata with the settings that shape its chunks."""
    digest = _settings_digest(splitter, options)
    record = {"text": section.text, "metadata": section.metadata}
    digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str).encode())
    return digest.hexdigest()


def chunk_sections(source: str, sections: list[Section], splitter: SplitterSettings) -> list[Chunk]:
    """Split a source's sections into chunks carrying their metadata and offsets."""
    chunks: list[Chunk] = []
    for section in sections:
        for piece in split_text(section.text, splitter):
            metadata = {
                **section.metadata,
                "headings": piece.headings,
                "start": piece.start,
                "end": piece.end,
            }
            chunks.append(Chunk(piece.text, source, len(chunks), metadata))
    return chunks


def make_documents(
    file: SourceFile,
    splitter: SplitterSettings,
    options: LoaderOptions | None = None,
    file_hash: str | None = None,
) -> list[Document]:
    """Load a file and split it into documents: one for the file, or one per record with an
    id (source `file#id`). Raise LoadError if the file cannot be ingested."""
    options = options or LoaderOptions()
    sections = load(file.path, options)
    documents: list[Document] = []
    keyed = [s for s in sections if s.key is not None]
    for section in keyed:
        chunks = chunk_sections(f"{file.source}#{section.key}", [section], splitter)
        if chunks:
            hashed = record_hash(section, splitter, options)
            documents.append(Document(chunks[0].source, hashed, chunks))
    rest = [s for s in sections if s.key is None]
    if rest:
        chunks = chunk_sections(file.source, rest, splitter)
        if chunks:
            doc_hash = file_hash or content_hash(file.path, splitter, options)
            documents.append(Document(file.source, doc_hash, chunks))
    if not documents:
        raise LoadError("no text in the file")
    return documents
