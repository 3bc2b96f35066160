"""Name source files, hash them, and turn them into documents of chunks (finding them is
`archivist.ingest.discovery`'s job)."""

import bisect
import functools
import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from archivist.ingest.discovery import Failure, FolderRules, SourceFile, discover
from archivist.ingest.loaders import (
    INCLUDING_SUFFIXES,
    LoaderOptions,
    LoadError,
    Section,
    check_size,
    decode_text,
    iter_load,
    suffix_of,
)
from archivist.ingest.splitter import SplitterSettings, TextChunk, split_text
from archivist.tools.errors import ArchivistError
from archivist.tools.store import Chunk

__all__ = ["Document", "Failure", "FolderRules", "Shard", "SourceFile", "discover"]

SHARD_FORMAT = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


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
class Document:
    """One source's new version: its content hash and its chunks."""

    source: str
    doc_hash: str
    chunks: list[Chunk]


def _settings_digest(splitter: SplitterSettings, options: LoaderOptions | None) -> "hashlib._Hash":
    return _digest_of_settings(splitter, options).copy()


def settings_digest(splitter: SplitterSettings, options: LoaderOptions | None) -> str:
    """A short digest of the settings a file's content hash is made with: a hash recorded
    under other settings is not this one."""
    return _digest_of_settings(splitter, options).hexdigest()[:16]


@functools.lru_cache(maxsize=16)
def _digest_of_settings(
    splitter: SplitterSettings, options: LoaderOptions | None
) -> "hashlib._Hash":
    settings = {"splitter": splitter.as_dict()}
    if options is not None:
        settings["loader"] = options.as_dict()
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode())


def content_hash(
    path: Path,
    splitter: SplitterSettings,
    options: LoaderOptions | None = None,
    root: Path | None = None,
) -> str:
    """Hash a file's bytes with the settings that shape its chunks: a change of either means
    re-chunking. A page with include directives (found in folder `root`) is hashed with the
    files they read, so a changed example is a changed page; other files hash as before."""
    check_size(path)  # before reading: a huge file is refused without hashing it
    digest = _settings_digest(splitter, options)
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    if suffix_of(path) in INCLUDING_SUFFIXES:
        from archivist.ingest.loaders.includes import included_files

        try:
            text = decode_text(path.read_bytes())
        except LoadError:
            text = ""
        for included in included_files(path, text, root):
            digest.update(b"\0include\0" + included.as_posix().encode("utf-8", "surrogatepass"))
            digest.update(included.read_bytes())
    return digest.hexdigest()


def record_hash(section: Section, splitter: SplitterSettings, options: LoaderOptions) -> str:
    """Hash one record's text and metadata with the settings that shape its chunks."""
    digest = _settings_digest(splitter, options)
    record = {"text": section.text, "metadata": section.metadata}
    digest.update(json.dumps(record, sort_keys=True, ensure_ascii=False, default=str).encode())
    return digest.hexdigest()


def chunk_sections(
    source: str,
    sections: list[Section],
    splitter: SplitterSettings,
    pieces: list[list[TextChunk]] | None = None,
) -> list[Chunk]:
    """Split a source's sections into chunks carrying their metadata and offsets (`pieces`:
    each section's `split_text`, when it was made elsewhere)."""
    chunks: list[Chunk] = []
    for n, section in enumerate(sections):
        split = split_text(section.text, splitter) if pieces is None else pieces[n]
        line_of = _line_counter(section)
        for piece in split:
            metadata = {
                **section.metadata,
                "headings": piece.headings,
                "start": piece.start,
                "end": piece.end,
            }
            if piece.table_columns:
                metadata["table_columns"] = piece.table_columns
            if line_of is not None:
                metadata["lines"] = [line_of(piece.start), line_of(max(piece.end - 1, piece.start))]
            chunks.append(Chunk(piece.text, source, len(chunks), metadata))
    return chunks


_NEWLINE = re.compile("\n")


def _line_counter(section: Section) -> Callable[[int], int] | None:
    """The file line an offset into a section's text falls on, for text that is the file's
    own lines (None for extracted text: a PDF page, a slide, a record)."""
    if section.first_line is None:
        return None
    breaks = [match.start() for match in _NEWLINE.finditer(section.text)]
    first = section.first_line
    return lambda offset: first + bisect.bisect_left(breaks, offset)


def load_sections(file: SourceFile, options: LoaderOptions | None = None) -> list[Section]:
    """Load a file that holds no records: its sections, ready to split (raise LoadError if it
    cannot be ingested)."""
    return list(iter_load(file.path, options_for(file, options or LoaderOptions())))


def options_for(file: SourceFile, options: LoaderOptions) -> LoaderOptions:
    """The options a file is loaded with: these, with the folder its include directives may
    read from."""
    return replace(options, include_root=file.folder) if file.folder else options


def file_document(
    file: SourceFile,
    sections: list[Section],
    splitter: SplitterSettings,
    file_hash: str,
    pieces: list[list[TextChunk]] | None = None,
) -> Document:
    """The document of a file that holds no records, from its sections (and their splits, if
    made elsewhere); as `make_documents` gives it."""
    chunks = chunk_sections(file.source, sections, splitter, pieces)
    if not chunks:
        raise LoadError("no text in the file")
    return Document(file.source, file_hash, chunks)


def make_documents(
    file: SourceFile,
    splitter: SplitterSettings,
    options: LoaderOptions | None = None,
    file_hash: str | None = None,
) -> list[Document]:
    """Load a file and split it into documents: one for the file, or one per record with an
    id (source `file#id`). Raise LoadError if the file cannot be ingested."""
    return list(iter_documents(file, splitter, options, file_hash))


def iter_documents(
    file: SourceFile,
    splitter: SplitterSettings,
    options: LoaderOptions | None = None,
    file_hash: str | None = None,
    sections: Iterable[Section] | None = None,
) -> Iterator[Document]:
    """As `make_documents`, a document at a time: a record with an id as soon as it is read
    (JSON Lines are read line by line), the file's records without an id last, together.
    `sections`: the file's, when it was loaded elsewhere."""
    options = options or LoaderOptions()
    rest: list[Section] = []
    found = False
    if sections is None:
        sections = iter_load(file.path, options_for(file, options))
    for section in sections:
        if section.key is None:
            rest.append(section)
            continue
        chunks = chunk_sections(f"{file.source}#{section.key}", [section], splitter)
        if chunks:
            found = True
            yield Document(chunks[0].source, record_hash(section, splitter, options), chunks)
    if rest:
        chunks = chunk_sections(file.source, rest, splitter)
        if chunks:
            found = True
            doc_hash = file_hash or content_hash(file.path, splitter, options, file.folder)
            yield Document(file.source, doc_hash, chunks)
    if not found:
        raise LoadError("no text in the file")
