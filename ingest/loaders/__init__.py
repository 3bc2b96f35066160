"""Read files into text sections, one function per format, by content and never executed.

Every loader returns `Section`s: the extracted text (Markdown where the format has structure,
so the splitter keeps heading paths), its metadata, and for record formats (JSON, JSONL, CSV)
the record's id, which makes the record its own source `file#id`.
"""

import codecs
import csv
import datetime
import io
import json
import logging
import re
import zipfile
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 50 * 1024 * 1024
SNIFF_BYTES = 8192
AUTO_TEXT_FIELDS = ("text", "content", "body")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.S)
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
_HTML_DROPPED = ["nav", "header", "footer", "script", "style", "noscript", "template", "svg"]
_DIGITS = re.compile(r"\d+")


class LoadError(Exception):
    """A file that cannot be ingested; the message is the reason shown to the user."""


@dataclass
class Section:
    """Text extracted from a file (a whole document, a page, or a record), with its metadata.

    `key` is set for a record with an id: the record is then its own source, `file#key`.
    """

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    key: str | None = None


@dataclass(frozen=True)
class LoaderOptions:
    """How record formats (JSON, JSONL, CSV) are read."""

    text_field: str | None = None
    """The field holding a record's text; None: the first of text/content/body, else all
    scalar fields written as `name: value.` sentences."""
    id_field: str = "id"
    """The field whose value names a record's source `file#id`, when records have it."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


Loader = Callable[[Path, LoaderOptions], list[Section]]


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
    return str(next((m for m in ties if m.encoding == "cp1252"), best))


def read_text(path: Path) -> str:
    """Read a text file in whatever encoding it is in, refusing binary content."""
    return decode_text(path.read_bytes())


def load_markdown(path: Path, options: LoaderOptions) -> list[Section]:
    """Load Markdown; YAML front matter becomes metadata."""
    text = read_text(path)
    metadata: dict[str, Any] = {}
    if match := _FRONT_MATTER.match(text):
        import yaml

        try:
            front = yaml.safe_load(match.group(1))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 2})" if mark else ""
            raise LoadError(f"invalid YAML front matter{where}") from None
        if isinstance(front, dict):
            metadata = {str(k): _jsonable(v) for k, v in front.items() if v is not None}
        text = text[match.end() :]
    return [Section(text, metadata)]


def load_plain(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a plain text file."""
    return [Section(read_text(path))]


def load_html(path: Path, options: LoaderOptions) -> list[Section]:
    """Load HTML as Markdown, without navigation, page header and footer, scripts and styles."""
    from bs4 import BeautifulSoup
    from markdownify import MarkdownConverter

    soup = BeautifulSoup(read_text(path), "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for element in soup.find_all(_HTML_DROPPED):
        element.decompose()
    root = soup.find("main") or soup.body or soup
    converter = MarkdownConverter(
        heading_style="ATX",
        bullets="-",
        strip=["a", "img"],
        escape_asterisks=False,
        escape_underscores=False,
        table_infer_header=True,
    )
    text = re.sub(r"\n{3,}", "\n\n", converter.convert_soup(root)).strip()
    return [Section(text, {"title": title} if title else {})]


def load_pdf(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a PDF's text page by page, without the headers and footers repeated on its pages."""
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    # pypdf logs damaged-file warnings through logging; the load error says what matters.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):
            raise LoadError("encrypted PDF (needs a password)")
        pages = [page.extract_text() or "" for page in reader.pages]
        title = (reader.metadata or {}).get("/Title") if reader.metadata else None
    except LoadError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise LoadError(f"damaged PDF: {exc}") from None
    pages = strip_repeated_lines(pages)
    metadata = {"title": str(title)} if title else {}
    sections = [
        Section(text, {**metadata, "page": number})
        for number, text in enumerate(pages, start=1)
        if text.strip()
    ]
    if not sections and pages:
        raise LoadError("no text in the PDF (a scanned PDF needs OCR first)")
    return sections


def strip_repeated_lines(pages: list[str], edge: int = 2, share: float = 0.6) -> list[str]:
    """Remove running headers and footers: lines among the first or last `edge` lines of at
    least `share` of the pages (three or more), compared with their numbers masked."""
    if len(pages) < 3:
        return pages
    split = [[line for line in page.splitlines() if line.strip()] for page in pages]
    tops: Counter[str] = Counter()
    bottoms: Counter[str] = Counter()
    for lines in split:
        tops.update({_mask(line) for line in lines[:edge]})
        bottoms.update({_mask(line) for line in lines[-edge:]})
    needed = max(3, share * len(pages))
    headers = {line for line, n in tops.items() if n >= needed}
    footers = {line for line, n in bottoms.items() if n >= needed}
    cleaned = []
    for lines in split:
        tail = len(lines) - edge
        kept = [
            line
            for i, line in enumerate(lines)
            if not ((i < edge and _mask(line) in headers) or (i >= tail and _mask(line) in footers))
        ]
        cleaned.append("\n".join(kept))
    return cleaned


def _mask(line: str) -> str:
    return _DIGITS.sub("#", " ".join(line.split()))


def load_docx(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a Word document as Markdown: headings, list items, paragraphs and tables."""
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table

    try:
        document = docx.Document(str(path))
        blocks = []
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                blocks.append(_markdown_table(item))
            else:
                blocks.append(_docx_paragraph(item))
        title = document.core_properties.title
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise LoadError(f"damaged DOCX: {exc}") from None
    text = "\n\n".join(b for b in blocks if b.strip())
    return [Section(text, {"title": title} if title else {})]


def _docx_paragraph(paragraph) -> str:
    text = paragraph.text.strip()
    style = (paragraph.style.name if paragraph.style is not None else "") or ""
    if not text:
        return ""
    if style == "Title":
        return f"# {text}"
    if match := re.match(r"Heading (\d)", style):
        return f"{'#' * min(int(match.group(1)), 6)} {text}"
    if style.startswith("List"):
        return f"- {text}"
    return text


def _markdown_table(table) -> str:
    rows = [[" ".join(cell.text.split()) for cell in row.cells] for row in table.rows]
    if not rows:
        return ""
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(row) + " |" for row in rows[1:]]
    return "\n".join(lines)


def load_json(path: Path, options: LoaderOptions) -> list[Section]:
    """Load a JSON document: an array of records, an object holding one, or one record."""
    try:
        data = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise LoadError(f"invalid JSON at line {exc.lineno}, column {exc.colno}") from None
    if isinstance(data, dict) and not _has_text_field(data, options):
        lists = [v for v in data.values() if isinstance(v, list) and v and _all_dicts(v)]
        if len(lists) == 1:
            data = lists[0]
    records = data if isinstance(data, list) else [data]
    return _records(((n, r) for n, r in enumerate(records, start=1)), options, "record")


def load_jsonl(path: Path, options: LoaderOptions) -> list[Section]:
    """Load JSON Lines: one record a line."""

    def records() -> Iterator[tuple[int, Any]]:
        for number, line in enumerate(read_text(path).splitlines(), start=1):
            if not line.strip():
                continue
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as exc:
                raise LoadError(f"invalid JSON on line {number}: {exc.msg}") from None

    return _records(records(), options, "line")


def load_csv(path: Path, options: LoaderOptions) -> list[Section]:
    """Load CSV with a header row; each row becomes one record."""
    text = read_text(path)
    try:
        dialect = csv.Sniffer().sniff(text[:SNIFF_BYTES], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    try:
        reader = csv.DictReader(io.StringIO(text), dialect=dialect)
        rows = list(reader)
    except csv.Error as exc:
        raise LoadError(f"invalid CSV: {exc}") from None
    # A row longer than the header would lose values or pin them to the wrong column (often
    # a delimiter inside an unquoted field); a shorter row simply leaves its last fields empty.
    for number, row in enumerate(rows, start=2):
        if None in row:
            width = len(reader.fieldnames or [])
            raise LoadError(f"row {number} has {width + len(row[None])} fields, the header {width}")
    records = (
        (n, {k: v for k, v in row.items() if k is not None and v not in (None, "")})
        for n, row in enumerate(rows, start=2)
    )
    return _records(records, options, "row")


def _records(
    records: Iterable[tuple[int, Any]], options: LoaderOptions, unit: str
) -> list[Section]:
    """Turn records into sections: the text field (or all fields as sentences) is the text,
    the other scalar fields are metadata, and an id field names the record's source."""
    sections: list[Section] = []
    seen: dict[str, int] = {}
    for number, record in records:
        if not isinstance(record, dict):
            raise LoadError(f"{unit} {number} is not an object")
        text_field = _text_field(record, options)
        metadata = {
            str(k): _jsonable(v) for k, v in record.items() if k != text_field and _is_metadata(v)
        }
        if text_field is None:
            text = " ".join(_sentence(k, v) for k, v in record.items() if _is_metadata(v))
        else:
            value = record.get(text_field)
            text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        key = record.get(options.id_field)
        if key is not None and not isinstance(key, dict | list):
            key = str(key)
            if key in seen:
                raise LoadError(
                    f"duplicate {options.id_field} '{key}' ({unit}s {seen[key]} and {number})"
                )
            seen[key] = number
        if text.strip():
            sections.append(Section(text, metadata, key))
    return sections


def _has_text_field(record: dict, options: LoaderOptions) -> bool:
    names = [options.text_field] if options.text_field else AUTO_TEXT_FIELDS
    return any(name in record for name in names)


def _text_field(record: dict, options: LoaderOptions) -> str | None:
    if options.text_field:
        if options.text_field not in record:
            return None
        return options.text_field
    return next((name for name in AUTO_TEXT_FIELDS if isinstance(record.get(name), str)), None)


def _all_dicts(values: list) -> bool:
    return all(isinstance(v, dict) for v in values)


def _is_metadata(value: Any) -> bool:
    """Scalars and lists of scalars become metadata; nested objects are left out."""
    if isinstance(value, list):
        return all(_is_metadata(v) and not isinstance(v, list) for v in value)
    return isinstance(value, str | int | float | bool | datetime.date) and value != ""


def _sentence(key: str, value: Any) -> str:
    text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
    text = " ".join(text.split())
    return f"{key}: {text}" + ("" if text.endswith((".", "!", "?", "。", "！", "？")) else ".")


def _jsonable(value: Any) -> Any:
    """Make a YAML or JSON value storable in a payload (dates become ISO strings)."""
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


LOADERS: dict[str, Loader] = {
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".txt": load_plain,
    ".text": load_plain,
    ".html": load_html,
    ".htm": load_html,
    ".pdf": load_pdf,
    ".docx": load_docx,
    ".json": load_json,
    ".jsonl": load_jsonl,
    ".ndjson": load_jsonl,
    ".csv": load_csv,
}
RECORD_FORMATS = {".json", ".jsonl", ".ndjson", ".csv"}


def supported(path: Path) -> bool:
    """Whether a file's extension has a loader."""
    return path.suffix.lower() in LOADERS


def skip_reason(path: Path) -> str:
    """Say why a file of an unsupported type is skipped, telling binary from text."""
    kind = path.suffix or "no extension"
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if looks_binary(head):
        return f"binary file of unsupported type '{kind}'"
    return f"unsupported file type '{kind}' (text: rename it to .txt to ingest it)"


def check_size(path: Path) -> None:
    """Refuse an empty file or one over the size limit, from its size alone (nothing is read)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise LoadError(f"larger than the {MAX_FILE_BYTES // 2**20} MB limit ({size // 2**20} MB)")
    if size == 0:
        raise LoadError("empty file")


def load(path: Path, options: LoaderOptions | None = None) -> list[Section]:
    """Load a file with the loader for its format; raise LoadError with the reason."""
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        raise LoadError(skip_reason(path))
    check_size(path)
    try:
        sections = loader(path, options or LoaderOptions())
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror or exc}") from None
    except RecursionError:
        raise LoadError("nested too deeply to read") from None
    if not any(s.text.strip() for s in sections):
        raise LoadError("no text in the file")
    return sections
