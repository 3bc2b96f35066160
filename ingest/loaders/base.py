"""What every loader shares: the section record, the load error, options, text decoding, and
bounded reading of zip packages (DOCX, PPTX, XLSX, ODT, EPUB)."""

from __future__ import annotations

import codecs
import contextlib
import datetime
import re
import zipfile
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a listing reads this module's suffixes: events only where loads report
    from archivist.tools.progress import Event, ProgressFn

MAX_FILE_BYTES = 50 * 1024 * 1024
MAX_UNPACKED_BYTES = 24 * 1024 * 1024
"""The most a zip package's text parts (XML, HTML) may hold unpacked: parsing XML takes
about 25 times its size in memory, and a few KB of deflate can unpack to hundreds of MB."""
MAX_STREAMED_BYTES = 256 * 1024 * 1024
"""The most a workbook's parts may hold unpacked: calamine reads a sheet's XML as a stream,
not a tree in memory, so the limit is time (about 20 MB a second), not memory; a sheet that
declares all 1,048,576 rows, each empty and styled, is about 40 MB of XML."""
SNIFF_BYTES = 8192
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp")
"""Pictures, read by OCR (`archivist.ingest.loaders.ocr`)."""
SPREADSHEETS = {".xlsx": "XLSX", ".xlsm": "XLSM", ".xlsb": "XLSB", ".xls": "XLS", ".ods": "ODS"}
"""Workbooks, read by calamine (`archivist.ingest.loaders.office`), with their kinds' names."""
INCLUDING_SUFFIXES = frozenset({".md", ".markdown", ".mdx", ".rst"})
"""The formats whose include directives are read (`archivist.ingest.loaders.includes`)."""
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# A well-formed UTF-8 multi-byte sequence; legacy 8-bit text almost never contains one.
_UTF8_SEQUENCE = re.compile(
    rb"[\xc2-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
)
# Parts of an office package that are pictures, fonts or media: never parsed, so not counted.
_BINARY_PARTS = re.compile(
    r"\.(png|jpe?g|gif|bmp|tiff?|emf|wmf|svg|webp|ico|ttf|otf|woff2?|mp3|mp4|m4a|wav|avi|mov"
    r"|bin|ole|odg|pdf)$",
    re.I,
)


class LoadError(Exception):
    """A file that cannot be ingested; the message is the reason shown to the user."""


class NotADocument(LoadError):
    """A file that holds no document (a config file, an image): skipped, not failed."""


@dataclass
class Section:
    """Text extracted from a file (a whole document, a page, or a record), with its metadata.

    `key` is set for a record with an id: the record is then its own source, `file#key`.
    `first_line` is set where the text is the file's own lines (plain text, Markdown): the
    file's line the text starts on, so each chunk can name its `lines`.
    """

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None
    first_line: int | None = None


@dataclass(frozen=True)
class LoaderOptions:
    """How files are read: record fields, extra plain-text types, and named loaders."""

    text_field: str | None = None
    """The field holding a record's text; None: the first of text/content/body, else all
    scalar fields written as `name: value.` sentences."""
    id_field: str = "id"
    """The field whose value names a record's source `file#id`, when records have it."""
    text_extensions: frozenset[str] = frozenset()
    """More extensions read as plain text (`.py`, `.toml`), lower case with the dot."""
    extra_loaders: tuple[tuple[str, str], ...] = ()
    """(glob pattern, `module:Class` of a LangChain document loader), first match wins."""
    include_root: Path | None = None
    """The folder include directives may read files from (None: the file's own folder)."""

    def as_dict(self) -> dict[str, Any]:
        """The options that shape a record file's chunks (hashed with its content).

        Only the record fields: which files are read is not part of a file's version, and
        leaving it out keeps the hashes of stores ingested before these options existed.
        """
        return {"text_field": self.text_field, "id_field": self.id_field}


Loader = Callable[[Path, LoaderOptions], list[Section]]

_progress: ContextVar[ProgressFn | None] = ContextVar("loader_progress", default=None)


@contextlib.contextmanager
def reporting(notify: ProgressFn) -> Iterator[None]:
    """Send the progress of long loads (OCR's pages) to `notify` while in the block."""
    token = _progress.set(notify)
    try:
        yield
    finally:
        _progress.reset(token)


def report(event: Event) -> None:
    """Tell whoever listens (`reporting`) how a long load goes."""
    notify = _progress.get()
    if notify is not None:
        notify(event)


def looks_binary(data: bytes) -> bool:
    """Whether bytes look like binary content: NUL bytes outside a UTF-16/32 text."""
    return b"\0" in data[:SNIFF_BYTES] and not data.startswith(tuple(b for b, _ in _BOMS))


def decode_text(data: bytes) -> str:
    """Decode a text file's bytes: a BOM decides, then UTF-8, then a detected encoding.

    Bytes that are mostly well-formed UTF-8 with some invalid sequences are refused rather
    than read as a legacy encoding, which would turn every non-ASCII character into mojibake.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(codec)
            except UnicodeDecodeError as exc:
                raise LoadError(f"invalid {codec.upper()} text (byte {exc.start})") from None
    if looks_binary(data):
        raise LoadError("binary content (NUL bytes) in a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad = exc.start
    invalid = data.decode("utf-8", errors="replace").count("\ufffd")
    if len(_UTF8_SEQUENCE.findall(data)) >= invalid:
        raise LoadError(f"damaged UTF-8 text: invalid byte sequence at byte {first_bad}")
    from charset_normalizer import from_bytes

    matches = from_bytes(data)
    best = matches.best()
    if best is None:
        raise LoadError(f"not valid UTF-8 (byte {first_bad}) and no other text encoding fits")
    # Short texts often fit several code pages equally well; Windows-1252 is the commonest.
    ties = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    if best.encoding in _LATIN_PAGES and best.encoding != "cp1252":
        western = _western(data)
        if western is not None:
            return western
    return str(next((m for m in ties if m.encoding == "cp1252"), best))


# Single-byte code pages of Latin script that a detector may prefer to Windows-1252 on a
# short Western text (French "Crème à" read as Baltic "Crčme ą").
_LATIN_PAGES = frozenset(
    "cp1250 cp1254 cp1257 cp775 cp850 cp437 latin_1 iso8859_2 iso8859_3 iso8859_4 iso8859_9 "
    "iso8859_10 iso8859_13 iso8859_14 iso8859_15 iso8859_16 mac_latin2 mac_iceland mac_roman "
    "mac_turkish".split()
)
# What a Western European text holds beyond ASCII: Latin-1's letters and the typography of
# Windows-1252 (quotes, dashes, the euro).
_WESTERN = re.compile(
    "[^\x00-\x7f\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u00ff\u0152\u0153\u0160\u0161"
    "\u0178\u017d\u017e\u00a0\u00a1\u00a3\u00a7\u00ab\u00b0\u00b7\u00bb\u00bf"
    "\u2013\u2014\u2018\u2019\u201a\u201c\u201d\u201e\u2022\u2026\u20ac]"
)


def _western(data: bytes) -> str | None:
    """The bytes as Windows-1252 when every character beyond ASCII that gives is a Western
    European letter or mark (else None: another Latin code page may fit better)."""
    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    return None if _WESTERN.search(text) else text


def read_text(path: Path) -> str:
    """Read a text file in whatever encoding it is in, refusing binary content."""
    return decode_text(path.read_bytes())


def open_package(path: Path, kind: str, limit: int = MAX_UNPACKED_BYTES) -> zipfile.ZipFile:
    """Open a zip package, refusing one whose text parts unpack to more than `limit` bytes.

    The sizes are the ones the zip declares; zipfile stops reading a part at its declared
    size (and fails its checksum), so a part cannot unpack to more than it says.
    """
    try:
        package = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise LoadError(f"damaged {kind}: {exc}") from None
    unpacked = sum(
        info.file_size for info in package.infolist() if not _BINARY_PARTS.search(info.filename)
    )
    if unpacked > limit:
        package.close()
        raise LoadError(
            f"{kind} unpacks to {unpacked // 2**20} MB of text, over the "
            f"{limit // 2**20} MB limit (a zip bomb, or split the document)"
        )
    return package


def jsonable(value: Any) -> Any:
    """Make a YAML or JSON value storable in a payload (dates become ISO strings)."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def clean_metadata(values: dict[str, Any]) -> dict[str, Any]:
    """Keep the metadata values that say something (no None, no empty strings)."""
    return {k: jsonable(v) for k, v in values.items() if v not in (None, "", [], ())}
