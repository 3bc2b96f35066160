"""PDF: text page by page, without the running headers and footers printed on every page."""

import logging
import re
import unicodedata
import zipfile
from collections import Counter
from pathlib import Path

from archivist.ingest.loaders import ocr
from archivist.ingest.loaders.base import LoaderOptions, LoadError, NotADocument, Section

_NUMBER = re.compile(r"\d+")
# Typographic ligatures PDF fonts set as one glyph (ﬁ, ﬂ, ﬀ, ﬃ, ﬄ, ﬅ, ﬆ), spelt out as
# their letters so that "Definition" is found; only these: NFKC on the whole text would also
# rewrite CJK punctuation and full-width forms.
_LIGATURES = {code: unicodedata.normalize("NFKC", chr(code)) for code in range(0xFB00, 0xFB07)}


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
        pages = [(page.extract_text() or "").translate(_LIGATURES) for page in reader.pages]
        title = (reader.metadata or {}).get("/Title") if reader.metadata else None
    except LoadError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise LoadError(f"damaged PDF: {exc}") from None
    scanned = [n for n, page in enumerate(pages, start=1) if not page.strip()]
    read: dict[int, str] = {}
    if scanned and (len(scanned) == len(pages) or ocr.available()):
        # Pages without a usable text layer are pictures of text: read them by OCR.
        read = ocr.read_scanned_pages(path, scanned)
        pages = [read.get(n, page) for n, page in enumerate(pages, start=1)]
    if not any(page.strip() for page in pages):
        # Pictures without text (photos, drawings): not a document to store, as an image
        # without text is not.
        raise NotADocument("no text in the PDF, not even by OCR")
    metadata = {"title": str(title)} if title else {}
    return [
        Section(text, {**metadata, "page": number, **({"ocr": True} if number in read else {})})
        for number, text in enumerate(strip_repeated_lines(pages), start=1)
        if text.strip()
    ]


def strip_repeated_lines(pages: list[str], edge: int = 2, share: float = 0.6) -> list[str]:
    """Remove running headers and footers: a line is one when it stands among the first or
    last `edge` lines of at least `share` of the pages (three or more) with the same text,
    or with the same text but for its numbers when one of them is the page's number
    (`Page 3 of 10`). A page keeps at least one line of body between its header and footer,
    so pages of a few lines that repeat a pattern (`Price …`, `In stock …`) lose nothing."""
    if len(pages) < 3:
        return pages
    split = [
        [" ".join(line.split()) for line in page.splitlines() if line.strip()] for page in pages
    ]
    tops: Counter[str] = Counter()
    bottoms: Counter[str] = Counter()
    for number, lines in enumerate(split, start=1):
        top, bottom = _edges(lines, edge)
        tops.update({_key(line, number) for line in lines[:top]})
        bottoms.update({_key(line, number) for line in lines[len(lines) - bottom :]})
    needed = max(3, share * len(pages))
    headers = {line for line, n in tops.items() if n >= needed}
    footers = {line for line, n in bottoms.items() if n >= needed}
    cleaned = []
    for number, lines in enumerate(split, start=1):
        top, bottom = _edges(lines, edge)
        kept = [
            line
            for i, line in enumerate(lines)
            if not (
                (i < top and _key(line, number) in headers)
                or (i >= len(lines) - bottom and _key(line, number) in footers)
            )
        ]
        cleaned.append("\n".join(kept))
    if not any(page.strip() for page in cleaned):
        return pages  # nothing but repeated lines: they are the text, not its frame
    return cleaned


def _edges(lines: list[str], edge: int) -> tuple[int, int]:
    """How many lines at the top and at the bottom may be header or footer: at most `edge`
    each, and never the page's last line of body."""
    room = max(0, (len(lines) - 1) // 2)
    return min(edge, room), min(edge, room)


def _key(line: str, page: int) -> str:
    """The text a header or footer line repeats: itself, or with its numbers masked when one
    of them is the page's number."""
    if any(int(n) == page for n in _NUMBER.findall(line) if len(n) < 6):
        return _NUMBER.sub("#", line)
    return line
