"""Pictures of known text for the OCR tests and benchmark: rendered, never photographed."""

from pathlib import Path

FONTS = {
    "en": "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "zh": "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
}
"""Debian's fonts-dejavu-core and fonts-wqy-microhei (.ci/run installs them)."""
TEXTS = {
    "en": [
        "Refunds are paid within 30 days of delivery.",
        "Warranty claims need the original receipt.",
        "Tents must be returned clean and dry.",
    ],
    "zh": [
        "退货须在收货后三十天内申请。",
        "保修期为两年，需出示原始收据。",
        "帐篷退回时必须干净且干燥。",
    ],
}


def missing_fonts() -> list[str]:
    """The fonts the pictures need that this machine lacks."""
    return [path for path in FONTS.values() if not Path(path).is_file()]


def render(lines: list[str], language: str, size: int = 32):
    """A white page with `lines` in black, as a scanner would give it (a PIL image): taller
    than wide, as pages are. (A strip of a few lines would cost the OCR more: its detector
    enlarges a picture until its shorter side is 736 pixels.)"""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.truetype(FONTS[language], size)
    page = Image.new("RGB", (800, max(800, 120 + 70 * len(lines))), "white")
    draw = ImageDraw.Draw(page)
    for n, line in enumerate(lines):
        draw.text((40, 40 + 70 * n), line, font=font, fill="black")
    return page


def save_scan(pages: list, path: Path) -> Path:
    """A PDF of pictures only (no text layer), as a scanner makes it: each picture at the
    resolution the OCR renders PDF pages at, so a page is read at the picture's own pixels."""
    from archivist.ingest.loaders.ocr import RENDER_SCALE

    pages[0].save(path, save_all=True, append_images=pages[1:], resolution=72 * RENDER_SCALE)
    return path
