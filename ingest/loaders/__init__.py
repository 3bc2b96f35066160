"""Read files into text sections, one loader per format, by content and never executed.

Every loader returns `Section`s: the extracted text (Markdown where the format has structure,
so the splitter keeps heading paths), its metadata, and for record formats (JSON, JSONL, CSV)
the record's id, which makes the record its own source `file#id`. The families live in their
own modules; `LOADERS` maps extensions to them, and `LoaderOptions` adds plain-text types and
LangChain loaders named for file patterns.
"""

import importlib
import os
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import Any

from archivist.ingest.loaders.base import (
    IMAGE_SUFFIXES,
    INCLUDING_SUFFIXES,
    MAX_FILE_BYTES,
    MAX_UNPACKED_BYTES,
    SNIFF_BYTES,
    SPREADSHEETS,
    Loader,
    LoaderOptions,
    LoadError,
    NotADocument,
    Section,
    decode_text,
    looks_binary,
    read_text,
)

__all__ = [
    "AUTO_TEXT_FIELDS",
    "EMPTY",
    "INCLUDING_SUFFIXES",
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
    "suffix_of",
    "supported",
]

LOADERS: dict[str, tuple[str, str]] = {
    ".md": ("text", "load_markdown"),
    ".markdown": ("text", "load_markdown"),
    ".mdx": ("text", "load_mdx"),
    ".rst": ("text", "load_rst"),
    ".txt": ("text", "load_plain"),
    ".text": ("text", "load_plain"),
    ".html": ("text", "load_html"),
    ".htm": ("text", "load_html"),
    ".xhtml": ("text", "load_html"),
    ".ipynb": ("text", "load_notebook"),
    ".pdf": ("pdf", "load_pdf"),
    ".docx": ("office", "load_docx"),
    ".pptx": ("office", "load_pptx"),
    **dict.fromkeys(SPREADSHEETS, ("office", "load_spreadsheet")),
    ".odt": ("office", "load_odt"),
    ".epub": ("office", "load_epub"),
    ".rtf": ("office", "load_rtf"),
    ".eml": ("mail", "load_eml"),
    ".json": ("records", "load_json"),
    ".jsonl": ("records", "load_jsonl"),
    ".ndjson": ("records", "load_jsonl"),
    ".csv": ("records", "load_csv"),
    **dict.fromkeys(IMAGE_SUFFIXES, ("ocr", "load_image")),
}
"""The loader of each extension, as (module of this package, function): a module is imported
when a file of its format is first read, so finding files (and `archivist sources`) imports
none of them."""
RECORD_FORMATS = {".json", ".jsonl", ".ndjson", ".csv"}
_PLAIN = ("text", "load_plain")
_STREAMED = ("records", "load_jsonl")
"""JSON Lines, read a record at a time (`iter_jsonl`), never whole."""
_EXPORTS = {
    "AUTO_TEXT_FIELDS": "records",
    "iter_jsonl": "records",
    "strip_repeated_lines": "pdf",
    "load_with": "community",
    "loader_for": "community",
}
"""Names this package gives from its modules, imported when first asked for."""


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def suffix_of(path: "Path | str") -> str:
    """A file's extension, lower-cased, as `Path.suffix` tells it ('' for `.bashrc` or
    `name.`), from the string: a folder of thousands of files asks it of each."""
    name = path.name if isinstance(path, PurePath) else os.path.basename(path)
    dot = name.rfind(".")
    return name[dot:].lower() if 0 < dot < len(name) - 1 else ""


def _loader_name(path: "Path | str", options: LoaderOptions) -> tuple[str, str] | str | None:
    """Where a file's loader is: a (module, function) of this package, the spec of a named
    LangChain loader, or None when the file has none."""
    if options.extra_loaders:
        from archivist.ingest.loaders.community import loader_for

        if spec := loader_for(options, Path(path)):
            return spec
    suffix = suffix_of(path)
    if suffix in LOADERS:
        return LOADERS[suffix]
    if suffix in options.text_extensions:
        return _PLAIN
    return None


def _resolve(found: tuple[str, str] | str) -> Loader:
    if isinstance(found, str):
        from archivist.ingest.loaders.community import load_with

        return lambda p, o: load_with(found, p)
    module, function = found
    return getattr(importlib.import_module(f"{__name__}.{module}"), function)


def supported(path: "Path | str", options: LoaderOptions | None = None) -> bool:
    """Whether a file has a loader: by its extension, --text-ext, or a named loader."""
    return _loader_name(path, options or LoaderOptions()) is not None


def streamed(path: Path, options: LoaderOptions | None = None) -> bool:
    """Whether a file is read a record at a time (JSON Lines), never whole."""
    return _loader_name(path, options or LoaderOptions()) == _STREAMED


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


EMPTY = "empty file"
"""The reason an empty file is not a document (one the store held is removed: emptied)."""


def check_size(path: Path) -> None:
    """Refuse an empty file or one over the size limit, from its size alone (nothing is read)."""
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise LoadError(f"larger than the {MAX_FILE_BYTES // 2**20} MB limit ({size // 2**20} MB)")
    if size == 0:
        raise NotADocument(EMPTY)


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
    found = _loader_name(path, options)
    if found is None:
        raise NotADocument(skip_reason(path))
    check_size(path)
    with_text = False
    try:
        if found == _STREAMED:
            found = ("records", "iter_jsonl")
        sections = _resolve(found)(path, options)
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
