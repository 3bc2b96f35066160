"""Spreadsheets as people have them: huge declared ranges, .ods, passwords, odd part names."""

import io
import re
import warnings
import zipfile
from pathlib import Path

import pytest

from archivist.ingest.loaders import LoadError, load, supported


def _workbook(path: Path, title: str | None = None) -> Path:
    import openpyxl

    book = openpyxl.Workbook()
    if title:
        book.properties.title = title
    sheet = book.active
    sheet.title = "Tents"
    sheet.append(["name", "price"])
    sheet.append(["Summit", 199])
    sheet.append(["Meadow", 89.5])
    book.save(str(path))
    return path


def _rewrite(path: Path, target: Path, change) -> Path:
    """Copy a zip package, passing each part's (name, bytes) through `change`."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in source.infolist():
            name, data = change(info.filename, source.read(info.filename))
            out.writestr(name, data)
    return target


def test_a_sheet_declaring_a_million_rows_reads_only_the_cells_it_holds(tmp_path):
    # As office programs write it: the whole grid declared, every column styled, hundreds of
    # thousands of empty styled rows down to row 1,048,576. A few hundred KB on disk.
    def declare(name: str, data: bytes) -> tuple[str, bytes]:
        if name != "xl/worksheets/sheet1.xml":
            return name, data
        text = re.sub(
            r'<dimension ref="[^"]*"/>', '<dimension ref="A1:XFD1048576"/>', data.decode()
        )
        rows = "".join(f'<row r="{i}" s="1" customFormat="1"/>' for i in range(4, 200_000))
        rows += '<row r="1048576" s="1" customFormat="1"/>'
        text = text.replace(
            "<sheetData>", '<cols><col min="1" max="16384" style="1"/></cols><sheetData>'
        )
        return name, text.replace("</sheetData>", rows + "</sheetData>").encode()

    huge = _rewrite(_workbook(tmp_path / "plain.xlsx"), tmp_path / "huge.xlsx", declare)
    assert huge.stat().st_size < 1_000_000
    [tents] = load(huge)
    assert tents.text == "# Tents\n\nname: Summit; price: 199\nname: Meadow; price: 89.5"
    assert tents.metadata == {"sheet": "Tents"}


def test_a_sheet_writing_every_one_of_its_million_rows_is_read_not_taken_for_a_zip_bomb(
    tmp_path,
):
    # Every empty styled row written, down to 1,048,576: about 40 MB of XML unpacked, which
    # calamine reads as a stream (the limit on XML parsed into a tree is 24 MB).
    def declare(name: str, data: bytes) -> tuple[str, bytes]:
        if name != "xl/worksheets/sheet1.xml":
            return name, data
        rows = "".join(f'<row r="{i}" s="1" customFormat="1"/>' for i in range(4, 1_048_577))
        return name, data.decode().replace("</sheetData>", rows + "</sheetData>").encode()

    huge = _rewrite(_workbook(tmp_path / "plain.xlsx"), tmp_path / "huge.xlsx", declare)
    with zipfile.ZipFile(huge) as package:
        assert package.getinfo("xl/worksheets/sheet1.xml").file_size > 24 * 2**20
    [tents] = load(huge)
    assert tents.text == "# Tents\n\nname: Summit; price: 199\nname: Meadow; price: 89.5"


def test_a_legacy_xls_workbook_is_read_sheet_by_sheet(tmp_path):
    xlwt = pytest.importorskip("xlwt")  # the one writer of .xls (BIFF8) for Python
    book = xlwt.Workbook()
    prices = book.add_sheet("Prices")
    for column, label in enumerate(["item", "price"]):
        prices.write(0, column, label)
    prices.write(1, 0, "tent")
    prices.write(1, 1, 199)
    book.add_sheet("Empty")
    notes = book.add_sheet("Notes")
    notes.write(0, 0, "Stoves ship in spring.")
    path = tmp_path / "legacy.xls"
    book.save(str(path))
    assert path.read_bytes()[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # an OLE file
    sections = load(path)
    assert [(s.metadata["sheet"], s.text) for s in sections] == [
        ("Prices", "# Prices\n\nitem: tent; price: 199"),
        ("Notes", "# Notes\n\nStoves ship in spring."),
    ]


def test_ods_sheets_are_read_like_workbooks(tmp_path):
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    for name, rows in (("Tents", [["name", "season"], ["Summit", "winter"]]), ("Empty", [])):
        table = Table(name=name)
        for values in rows:
            row = TableRow()
            for value in values:
                cell = TableCell(valuetype="string")
                cell.addElement(P(text=value))
                row.addElement(cell)
            table.addElement(row)
        document.spreadsheet.addElement(table)
    path = tmp_path / "catalogue.ods"
    document.save(str(path))
    assert supported(path)
    [tents] = load(path)
    assert tents.text == "# Tents\n\nname: Summit; season: winter"
    assert tents.metadata == {"sheet": "Tents"}


def test_an_encrypted_workbook_is_named_as_such_with_what_to_do(tmp_path):
    from msoffcrypto.format.ooxml import OOXMLFile

    plain = _workbook(tmp_path / "plain.xlsx")
    locked = tmp_path / "locked.xlsx"
    with plain.open("rb") as source, locked.open("wb") as out:
        OOXMLFile(source).encrypt("secret", out)
    with pytest.raises(LoadError) as failure:
        load(locked)
    assert str(failure.value) == (
        "encrypted XLSX (password-protected): save a copy without the password in your "
        "spreadsheet program and ingest that"
    )


def test_part_names_are_matched_whatever_their_case(tmp_path):
    import xlsxwriter  # writes shared strings, as Excel does (openpyxl writes them inline)

    path = tmp_path / "written.xlsx"
    book = xlsxwriter.Workbook(str(path))
    book.set_properties({"title": "Price list"})
    sheet = book.add_worksheet("Tents")
    sheet.write_row(0, 0, ["name", "price"])
    sheet.write_row(1, 0, ["Summit", 199])
    book.close()

    def recase(name: str, data: bytes) -> tuple[str, bytes]:
        renamed = {
            "xl/sharedStrings.xml": "xl/SharedStrings.xml",
            "docProps/core.xml": "docProps/Core.xml",
        }
        return renamed.get(name, name), data

    odd = _rewrite(path, tmp_path / "odd.xlsx", recase)
    assert "xl/SharedStrings.xml" in zipfile.ZipFile(odd).namelist()
    [tents] = load(odd)
    assert tents.text == "# Tents\n\nname: Summit; price: 199"
    assert tents.metadata == {"title": "Price list", "sheet": "Tents"}


def test_reading_a_workbook_raises_no_library_warnings(tmp_path):
    path = _workbook(tmp_path / "plain.xlsx", title="Catalogue")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        [tents] = load(path)
    assert caught == []
    assert tents.metadata == {"title": "Catalogue", "sheet": "Tents"}


def test_a_folder_with_a_locked_workbook_stores_the_others(archivist, tmp_path):
    from msoffcrypto.format.ooxml import OOXMLFile

    folder = tmp_path / "sheets"
    folder.mkdir()
    _workbook(folder / "tents.xlsx")
    locked = io.BytesIO()
    with (folder / "tents.xlsx").open("rb") as source:
        OOXMLFile(source).encrypt("secret", locked)
    (folder / "salaries.xlsx").write_bytes(locked.getvalue())
    report = archivist.ingest([str(folder)], "sheets")
    assert [s["source"] for s in report.stored] == ["tents.xlsx"]
    assert report.failed == [
        {
            "source": "salaries.xlsx",
            "reason": "encrypted XLSX (password-protected): save a copy without the password "
            "in your spreadsheet program and ingest that",
        }
    ]
