"""A workbook declaring a million rows, ingested as a user runs it: `archivist ingest` as a
process, start to exit, against the fake Ollama, beside the same workbook without them.

Office programs write a sheet's whole grid (`A1:XFD1048576`) with every empty styled row down
to row 1,048,576: a file of a few hundred KB whose declared range a reader made for it walks
in full. The target is 5 s for the command, whatever the declared range.

    .venv/bin/python benchmarks/formats.py
"""

import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_ollama import FakeOllama  # noqa: E402

ROWS = 1_048_576


def plain(path: Path) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Tents"
    sheet.append(["name", "price", "weight"])
    for n in range(200):
        sheet.append([f"Tent model {n}", 99 + n, f"{1 + n / 100:.2f} kg"])
    book.save(str(path))
    return path


def declaring_a_million_rows(source: Path, target: Path) -> Path:
    """The same workbook with the whole grid declared and every empty row written, styled."""
    with zipfile.ZipFile(source) as inp, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in inp.infolist():
            data = inp.read(info.filename)
            if info.filename == "xl/worksheets/sheet1.xml":
                text = re.sub(
                    r'<dimension ref="[^"]*"/>', '<dimension ref="A1:XFD1048576"/>', data.decode()
                )
                empty = "".join(
                    f'<row r="{i}" s="1" customFormat="1"/>' for i in range(202, ROWS + 1)
                )
                text = text.replace(
                    "<sheetData>", '<cols><col min="1" max="16384" style="1"/></cols><sheetData>'
                )
                data = text.replace("</sheetData>", empty + "</sheetData>").encode()
            out.writestr(info.filename, data)
    return target


def ingest(path: Path, home: Path, ollama: str) -> tuple[float, str]:
    env = {**os.environ, "OLLAMA_HOST": ollama, "ARCHIVIST_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "archivist", "ingest", str(path), "--store", "bench"],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return seconds, done.stdout.strip().splitlines()[0]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeOllama() as fake:
        folder = Path(tmp)
        small = plain(folder / "tents.xlsx")
        huge = declaring_a_million_rows(small, folder / "tents-declared.xlsx")
        print("| workbook | rows written | KB on disk | seconds (process) | summary |")
        print("|---|---|---|---|---|")
        results = {}
        for name, path, rows in (("plain", small, 201), ("declaring 1,048,576 rows", huge, ROWS)):
            seconds, summary = ingest(path, folder / f"home-{path.stem}", fake.url)
            results[name] = seconds
            size = path.stat().st_size // 1024
            print(f"| {name} | {rows:,} | {size:,} | {seconds:.2f} | {summary} |")
        ratio = results["declaring 1,048,576 rows"] / results["plain"]
        print(f"\nmillion-row / plain: {ratio:.2f}x (target: the million-row one in ≤ 5 s)")


if __name__ == "__main__":
    main()
