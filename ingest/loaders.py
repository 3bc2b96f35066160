"""Read files into text sections, one function per format, by content and never executed."""

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MAX_FILE_BYTES = 50 * 1024 * 1024
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.S)


class LoadError(Exception):
    """A file that cannot be ingested; the message is the reason shown to the user."""


@dataclass
class Section:
    """Text extracted from a file (a whole document, or one page), with its metadata."""

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)


def read_text(path: Path) -> str:
    """Read a text file as UTF-8 (with or without BOM), refusing binary content."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        raise LoadError("binary content (NUL bytes) in a text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoadError(f"not valid UTF-8 text (byte {exc.start})") from None


def load_markdown(path: Path) -> list[Section]:
    """Load Markdown; simple `key: value` front matter becomes metadata."""
    text = read_text(path)
    metadata: dict[str, Any] = {}
    if match := _FRONT_MATTER.match(text):
        for line in match.group(1).splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip():
                metadata[key.strip()] = value.strip().strip("\"'")
        text = text[match.end() :]
    return [Section(text, metadata)]


def load_plain(path: Path) -> list[Section]:
    """Load a plain text file."""
    return [Section(read_text(path))]


LOADERS: dict[str, Callable[[Path], list[Section]]] = {
    ".md": load_markdown,
    ".markdown": load_markdown,
    ".txt": load_plain,
}


def supported(path: Path) -> bool:
    """Whether a file's extension has a loader."""
    return path.suffix.lower() in LOADERS


def load(path: Path) -> list[Section]:
    """Load a file with the loader for its format; raise LoadError with the reason."""
    loader = LOADERS.get(path.suffix.lower())
    if loader is None:
        raise LoadError(f"unsupported file type '{path.suffix or path.name}'")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise LoadError(f"larger than the {MAX_FILE_BYTES // 2**20} MB limit ({size // 2**20} MB)")
    try:
        sections = loader(path)
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror or exc}") from None
    if not any(s.text.strip() for s in sections):
        raise LoadError("no text in the file")
    return sections
