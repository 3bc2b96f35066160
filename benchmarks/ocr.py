"""OCR quality and speed: pictures of known English and Chinese text read back.

Prints the character error rate (edit distance over the reference's characters) per language
and the pages read a second, for images and for a scanned PDF, on this machine's CPU.

    .venv/bin/python benchmarks/ocr.py          # needs the ocr extra and the two fonts
"""

import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from ocr_samples import TEXTS, missing_fonts, render, save_scan  # noqa: E402

from archivist.ingest.loaders import load, ocr  # noqa: E402
from archivist.tools.errors import install_command  # noqa: E402


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance between two strings, by characters."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def main() -> None:
    if not ocr.available() or missing_fonts():
        raise SystemExit(
            f"Needs: {install_command('ocr')} and fonts-dejavu-core, fonts-wqy-microhei"
        )
    ocr.read_picture(render(["warm-up"], "en"))  # loads the models once, as an ingest does
    print("| input | language | pages | seconds | pages/s | CER |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for language, lines in TEXTS.items():
            # Each page in another order: lines repeated on every page would be dropped as
            # running headers, as in any PDF.
            orders = [lines[n:] + lines[:n] for n in range(len(lines))]
            pages = [render(order, language) for order in orders]
            image = Path(folder) / f"{language}.png"
            pages[0].save(image)
            started = time.perf_counter()
            [section] = load(image)
            seconds = time.perf_counter() - started
            reference = "\n".join(lines)
            cer = edit_distance(section.text, reference) / len(reference)
            print(f"| image | {language} | 1 | {seconds:.2f} | {1 / seconds:.2f} | {cer:.2%} |")
            scan = Path(folder) / f"{language}.pdf"
            save_scan(pages, scan)
            started = time.perf_counter()
            read = load(scan)
            seconds = time.perf_counter() - started
            errors = sum(
                edit_distance(p.text, "\n".join(o)) for p, o in zip(read, orders, strict=True)
            )
            cer = errors / (len(reference) * len(pages))
            rate = len(pages) / seconds
            print(
                f"| scanned PDF | {language} | {len(pages)} | {seconds:.2f} | {rate:.2f} "
                f"| {cer:.2%} |"
            )


if __name__ == "__main__":
    main()
