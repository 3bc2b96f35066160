"""Text in pictures: scanned PDF pages and image files, read offline by OCR.

The optional extra `archivist[ocr]` brings rapidocr (PP-OCR detection and recognition models,
English and Chinese, inside its wheel, run by onnxruntime) and pypdfium2 (renders PDF pages).
Without it, an image is skipped and a scanned PDF fails, each naming the one command that
installs it.
"""

import functools
import importlib.util
import logging
import math
from pathlib import Path
from typing import Any

from archivist.ingest.loaders.base import (
    LoaderOptions,
    LoadError,
    NotADocument,
    Section,
    report,
)
from archivist.tools.errors import install_command
from archivist.tools.progress import Recognised

MAX_OCR_PAGES = 100
"""Pages of one PDF read by OCR at most: a longer scan fails with this limit as its reason.
Its time is bounded as every load's is, by the ingest's budget per file, which a load
reading pages by OCR gets several times over (`archivist.ingest.loading.OCR_FACTOR`)."""
RENDER_SCALE = 2.0
"""PDF pages are rendered at 144 dpi (72 × 2): small print stays legible to the recogniser."""
MAX_RENDER_PIXELS = 16_000_000
"""A rendered page's size at most, in pixels (4,000 × 4,000; ~64 MB as pdfium renders it):
a page larger in points (a poster, or a hostile 10⁶-point square) is rendered smaller, so its
memory is bounded by this, never by what the page declares. A4 at 144 dpi is 2 million."""
UNREADABLE_IMAGE = "an image that cannot be read (damaged, or not an image)"
MIN_SIDE = 24
"""Images narrower or lower than this many pixels (icons, spacers) hold no readable text."""


def available() -> bool:
    """Whether the OCR extra is installed."""
    return all(importlib.util.find_spec(name) for name in ("rapidocr", "pypdfium2"))


@functools.cache
def _engine() -> Any:
    from rapidocr import RapidOCR

    logging.getLogger("RapidOCR").setLevel(logging.ERROR)  # its INFO lines are not ours to show
    engine = RapidOCR()
    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    return engine


def read_picture(picture: Any) -> str:
    """Read the text of a picture (a path or a PIL image), line by line in reading order."""
    result = _engine()(picture)
    if result.boxes is None or not result.txts:
        return ""
    words = []
    for box, text in zip(result.boxes, result.txts, strict=True):
        ys = [point[1] for point in box]
        xs = [point[0] for point in box]
        words.append((min(ys), max(ys), min(xs), text.strip()))
    return "\n".join(" ".join(text for *_, text in line) for line in _lines(words) if line)


def _lines(words: list[tuple[float, float, float, str]]) -> list[list[tuple]]:
    """Group recognised boxes into lines: a box joins the line whose vertical span it shares
    for at least half its own height; lines top to bottom, boxes in a line left to right."""
    lines: list[list[tuple]] = []
    for word in sorted(words, key=lambda w: (w[0], w[2])):
        top, bottom = word[0], word[1]
        for line in lines:
            line_top = min(w[0] for w in line)
            line_bottom = max(w[1] for w in line)
            shared = min(bottom, line_bottom) - max(top, line_top)
            if shared >= (bottom - top) / 2:
                line.append(word)
                break
        else:
            lines.append([word])
    return [sorted(line, key=lambda w: w[2]) for line in lines]


def load_image(path: Path, options: LoaderOptions) -> list[Section]:
    """Load the text an image shows (a screenshot, a photographed page) by OCR."""
    if not available():
        needs = install_command("ocr")
        raise NotADocument(f"an image: its text is read by OCR, which needs: {needs}")
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            picture = image.convert("RGB")
    except (UnidentifiedImageError, OSError, ValueError):
        # Not a document that failed: a docs tree's broken or placeholder picture.
        raise NotADocument(UNREADABLE_IMAGE) from None
    if min(picture.size) < MIN_SIDE:
        raise NotADocument("an image too small to hold text")
    text = read_picture(picture)
    if not text.strip():
        raise NotADocument("no text found in the image")
    return [Section(text, {"ocr": True})]


def render_scale(width: float, height: float) -> float:
    """The scale a page of `width` × `height` points is rendered at: RENDER_SCALE, less for a
    page that would pass MAX_RENDER_PIXELS (0: a page without a size to render)."""
    if not (math.isfinite(width) and math.isfinite(height)) or width <= 0 or height <= 0:
        return 0.0
    return min(RENDER_SCALE, math.sqrt(MAX_RENDER_PIXELS / (width * height)))


def read_scanned_pages(path: Path, numbers: list[int]) -> dict[int, str]:
    """OCR the PDF pages `numbers` (1-based) of a file; return their text by page number."""
    if not available():
        needs = install_command("ocr")
        raise LoadError(
            f"no text layer in the PDF (a scan): its pages are read by OCR, which needs: {needs}"
        )
    if len(numbers) > MAX_OCR_PAGES:
        raise LoadError(
            f"a scan of {len(numbers):,} pages, over the {MAX_OCR_PAGES}-page OCR limit "
            "(split the PDF)"
        )
    import pypdfium2

    texts: dict[int, str] = {}
    try:
        document = pypdfium2.PdfDocument(str(path))
    except pypdfium2.PdfiumError as exc:
        raise LoadError(f"damaged PDF: {exc}") from None
    try:
        for done, number in enumerate(numbers, start=1):
            page = document[number - 1]
            try:
                scale = render_scale(*page.get_size())
                picture = page.render(scale=scale).to_pil() if scale else None
            finally:
                page.close()
            texts[number] = read_picture(picture) if picture is not None else ""
            report(Recognised(path.name, done, len(numbers)))
    finally:
        document.close()
    return texts
