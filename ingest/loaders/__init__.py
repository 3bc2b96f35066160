"""Read files into text sections, one loader per format, by content and never executed.

Every loader returns `Section`s: the extracted text (Markdown where the format has structure,
so the splitter keeps heading paths), its metadata, and for record formats (JSON, JSONL, CSV)
the record's id, which makes the record its own source `file#id`. The families live in their
own modules; `LOADERS` maps extensions to them, and `LoaderOptions` adds plain-text types and
LangChain loaders named for file patterns.
"""

from collections.abc import Iterator
from pathlib import Path

from archivist.ingest.loaders.base import (
    MAX_FILE_BYTES,
    MAX_UNPACKED_BYTES,
    SNIFF_BYTES,
    Loader,
    LoaderOptions,
    LoadError,
    NotADocument,
    Section,
    decode_text,
    looks_binary,
    read_text,
)
from archivist.ingest.loaders.community import load_with, loader_for
from archivist.ingest.loaders.mail import load_eml
from archivist.ingest.loaders.ocr import IMAGE_SUFFIXES, load_image
from archivist.ingest.loaders.office import (
    SPREADSHEETS,
    load_docx,
    load_epub,
    load_odt,
    load_pptx,
    load_rtf,
    load_spreadsheet,
)
from archivist.ingest.loaders.pdf import load_pdf, strip_repeated_lines
from archivist.ingest.loaders.records import (
    AUTO_TEXT_FIELDS,
    iter_jsonl,
    load_csv,
    load_json,
    load_jsonl,
)
from archivist.ingest.loaders.text import (
    load_html,
    load_markdown,
    load_mdx,
    load_notebook,
    load_plain,
    load_rst,
)

__all__ = [
    "AUTO_TEXT_FIELDS",
    "LOADERS",
    "MAX_FILE_BYTES",
    "MAX_UNPACKED_BYTES",
    "RECORD_FORMATS",
    "SNIFF_BYTES",
    "LoadError",
    "Loader",
    "LoaderOptions",
    "NotADocument",
    "Section",
    "check_size",
    "decode_text",
    "iter_jsonl",
    "iter_load",
    "load",
    "looks_binary",
    "read_text",
    "skip_reason",
    "streamed",
    "strip_repeated_lines",
    "supported",
]

LOADERS: dict[str, Loader] = {
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".mdx": load_mdx,
    ".rst": load_rst,
    ".txt": load_plain,
    ".text": load_plain,
    ".html": load_html,
    ".htm": load_html,
    ".xhtml": load_html,
    ".ipynb": load_notebook,
    ".pdf": load_pdf,
    ".docx": load_docx,
    ".pptx": load_pptx,
    **dict.fromkeys(SPREADSHEETS, load_spreadsheet),
    ".odt": load_odt,
    ".epub": load_epub,
    ".rtf": load_rtf,
    ".eml": load_eml,
    ".json": load_json,
    ".jsonl": load_jsonl,
    ".ndjson": load_jsonl,
    ".csv": load_csv,
    **dict.fromkeys(IMAGE_SUFFIXES, load_image),
}
RECORD_FORMATS = {".json", ".jsonl", ".ndjson", ".csv"}


def _loader(path: Path, options: LoaderOptions) -> Loader | None:
    if spec := loader_for(options, path):
        return lambda p, o: load_with(spec, p)
    suffix = path.suffix.lower()
    if suffix in LOADERS:
        return LOADERS[suffix]
    if suffix in options.text_extensions:
        return load_plain
    return None


def supported(path: Path, options: LoaderOptions | None = None) -> bool:
    """Whether a file has a loader: by its extension, --text-ext, or a named loader."""
    return _loader(path, options or LoaderOptions()) is not None


def streamed(path: Path, options: LoaderOptions | None = None) -> bool:
    """Whether a file is read a record at a time (JSON Lines), never whole."""
    return _loader(path, options or LoaderOptions()) is load_jsonl


def skip_reason(path: Path) -> str:
    """Say why a file of an unsupported type is skipped, telling binary from text."""
    kind = path.suffix.lower() or "no extension"
    try:
        with path.open("rb") as handle:
            head = handle.read(SNIFF_BYTES)
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    if looks_binary(head):
        return f"binary file of unsupported type '{kind}'"
    if not path.suffix:
        return "text file without an extension (name a loader with --loader to ingest it)"
    return f"unsupported text type '{kind}' (add --text-ext {kind} to ingest it as text)"


def check_size(path: Path) -> None:
    """Refuse an empty file or one over the size limit, from its size alone (nothing is read)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise LoadError(f"larger than the {MAX_FILE_BYTES // 2**20} MB limit ({size // 2**20} MB)")
    if size == 0:
        raise NotADocument("empty file")


def load(path: Path, options: LoaderOptions | None = None) -> list[Section]:
    """Load a file with the loader for its format; raise LoadError with the reason.

    Whatever a loader raises (a library's own error on a damaged or hostile file) fails that
    file alone, with the error as its reason.
    """
    return list(iter_load(path, options))


def iter_load(path: Path, options: LoaderOptions | None = None) -> Iterator[Section]:
    """Load a file section by section: JSON Lines a record at a time, other formats whole.

    Raises as `load` does, possibly after some sections were yielded (a bad line in the
    middle of a JSON Lines file)."""
    options = options or LoaderOptions()
    loader = _loader(path, options)
    if loader is None:
        raise NotADocument(skip_reason(path))
    check_size(path)
    with_text = False
    try:
        sections = iter_jsonl(path, options) if loader is load_jsonl else loader(path, options)
        for section in sections:
            with_text = with_text or bool(section.text.strip())
            yield section
    except LoadError:
        raise
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror or exc}") from None
    except RecursionError:
        raise LoadError("nested too deeply to read") from None
    except MemoryError:
        raise LoadError("too large to read in memory") from None
    except Exception as exc:
        kind = path.suffix.lstrip(".").upper() or "file"
        detail = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        raise LoadError(
            f"unreadable {kind} ({type(exc).__name__}{': ' + detail if detail else ''})"
        ) from None
    if not with_text:
        raise NotADocument("no text in the file")
