"""Every document format, written by a real library (or, for text formats, as people write
them) and read back: text, headings and metadata."""

import importlib.util
import zipfile
from email.message import EmailMessage

import pytest

from archivist.ingest.loaders import (
    MAX_UNPACKED_BYTES,
    LoaderOptions,
    LoadError,
    NotADocument,
    load,
    supported,
)
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import SourceFile, make_documents

MDX = """---
title: Installing
sidebar_position: 2
---
import Tabs from '@theme/Tabs';
import TabItem from '@theme/TabItem';
export const meta = {
  section: 'setup',
};

# Installing

{/* keep this page short */}
<Tabs groupId="os">
  <TabItem value="mac" label="macOS">
    Run the installer from the disk image.
  </TabItem>
  <TabItem value="linux" label="Linux">
    Use the package: `apt install northwind`.
  </TabItem>
</Tabs>

<Admonition type="tip" title="Offline">
Everything works without a network.
</Admonition>

```jsx
import Tabs from '@theme/Tabs';
<Tabs />
```
"""


def test_mdx_keeps_front_matter_and_text_and_drops_imports_and_components(tmp_path):
    path = tmp_path / "install.mdx"
    path.write_text(MDX, encoding="utf-8")
    [section] = load(path)
    assert section.metadata == {"title": "Installing", "sidebar_position": 2}
    text = section.text
    assert "import Tabs" not in text.split("```")[0] and "export const" not in text
    assert "section: 'setup'" not in text and "keep this page short" not in text
    assert "<Tabs" not in text.split("```")[0] and "TabItem" not in text.split("```")[0]
    assert "**macOS**\n\nRun the installer from the disk image." in text
    assert "Use the package: `apt install northwind`." in text
    assert "**Offline**\n\nEverything works without a network." in text
    # Code blocks are left as written.
    assert "```jsx\nimport Tabs from '@theme/Tabs';\n<Tabs />\n```" in text
    [doc] = make_documents(SourceFile(path, "install.mdx"), SplitterSettings())
    assert doc.chunks[0].metadata["headings"] == ["Installing"]


RST = """.. _install:

=========
Northwind
=========

Intro paragraph.

Installing
==========

Run the installer::

    ./install.sh

.. note:: Needs admin rights.

Upgrading
---------

Keep your settings.

.. This is a comment
   spanning lines.

Support
=======

Write to support.
"""


def test_rst_section_titles_become_headings_by_adornment_order(tmp_path):
    path = tmp_path / "guide.rst"
    path.write_text(RST, encoding="utf-8")
    [section] = load(path)
    assert section.metadata == {"title": "Northwind"}
    assert section.text == (
        "# Northwind\n\nIntro paragraph.\n\n## Installing\n\nRun the installer:\n\n"
        "    ./install.sh\n\nNote: Needs admin rights.\n\n### Upgrading\n\nKeep your settings."
        "\n\n## Support\n\nWrite to support."
    )
    splitter = SplitterSettings(chunk_size=200, chunk_overlap=0)
    [doc] = make_documents(SourceFile(path, "guide.rst"), splitter)
    # The last chunk holds the end of Installing › Upgrading and all of Support.
    assert doc.chunks[-1].metadata["headings"] == ["Northwind", "Installing › Upgrading · Support"]


def test_notebook_markdown_and_code_cells_without_outputs(tmp_path):
    import nbformat

    notebook = nbformat.v4.new_notebook()
    notebook.metadata["kernelspec"] = {"name": "python3", "language": "python"}
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# Loading data\n\nRead the orders file."),
        nbformat.v4.new_code_cell("orders = load('orders.csv')\norders.head()"),
    ]
    notebook.cells[1].outputs = [
        nbformat.v4.new_output("stream", text="OUTPUT-THAT-MUST-NOT-APPEAR\n")
    ]
    path = tmp_path / "analysis.ipynb"
    nbformat.write(notebook, str(path))
    [section] = load(path)
    assert section.text == (
        "# Loading data\n\nRead the orders file.\n\n"
        "```python\norders = load('orders.csv')\norders.head()\n```"
    )
    assert section.metadata == {"language": "python"}


def test_pptx_one_section_per_slide_with_notes_and_tables(tmp_path):
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    deck.core_properties.title = "Quarterly review"
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Sales"
    body = slide.placeholders[1].text_frame
    body.text = "Revenue grew 12%"
    point = body.add_paragraph()
    point.text = "Europe led the growth"
    point.level = 1
    slide.notes_slide.notes_text_frame.text = "Mention the Berlin store."
    second = deck.slides.add_slide(deck.slide_layouts[5])
    second.shapes.title.text = "Prices"
    table = second.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(4), Inches(1)).table
    for (r, c), value in {(0, 0): "item", (0, 1): "price", (1, 0): "tent", (1, 1): "199"}.items():
        table.cell(r, c).text = value
    path = tmp_path / "review.pptx"
    deck.save(str(path))
    first, prices = load(path)
    assert first.metadata == {
        "title": "Quarterly review",
        "page": 1,
        "slide": 1,
        "slide_title": "Sales",
    }
    assert first.text == (
        "# Sales\n\nRevenue grew 12%\n  - Europe led the growth\n\nNotes: Mention the Berlin store."
    )
    assert prices.metadata["slide"] == 2
    assert prices.text == "# Prices\n\n| item | price |\n|---|---|\n| tent | 199 |"


def test_xlsx_one_section_per_sheet_rows_as_labelled_text(tmp_path):
    import openpyxl

    book = openpyxl.Workbook()
    book.properties.title = "Catalogue"
    sheet = book.active
    sheet.title = "Tents"
    sheet.append(["name", "price", "season"])
    sheet.append(["Summit", 199.0, "4"])
    sheet.append(["Meadow", 89.5, None])
    other = book.create_sheet("Notes")
    other.append(["Prices include VAT."])
    book.create_sheet("Empty")
    path = tmp_path / "catalogue.xlsx"
    book.save(str(path))
    tents, notes = load(path)
    assert tents.metadata == {"title": "Catalogue", "sheet": "Tents"}
    assert tents.text == (
        "# Tents\n\nname: Summit; price: 199; season: 4\nname: Meadow; price: 89.5"
    )
    assert notes.text == "# Notes\n\nPrices include VAT."


def test_odt_headings_lists_and_tables(tmp_path):
    from odf import teletype
    from odf.opendocument import OpenDocumentText
    from odf.table import Table, TableCell, TableColumn, TableRow
    from odf.text import H, List, ListItem, P

    document = OpenDocumentText()
    document.meta.addElement(__import__("odf.dc", fromlist=["Title"]).Title(text="Field guide"))
    document.text.addElement(H(outlinelevel=1, text="Camping"))
    document.text.addElement(P(text="Pick a flat spot."))
    document.text.addElement(H(outlinelevel=2, text="Fire"))
    items = List()
    for text in ("Use the fire ring", "Keep water near"):
        item = ListItem()
        item.addElement(P(text=text))
        items.addElement(item)
    document.text.addElement(items)
    table = Table(name="Gear")
    table.addElement(TableColumn(numbercolumnsrepeated=2))
    for row_values in (("item", "weight"), ("tent", "2 kg")):
        row = TableRow()
        for value in row_values:
            cell = TableCell()
            paragraph = P()
            teletype.addTextToElement(paragraph, value)
            cell.addElement(paragraph)
            row.addElement(cell)
        table.addElement(row)
    document.text.addElement(table)
    path = tmp_path / "guide.odt"
    document.save(str(path))
    [section] = load(path)
    assert section.metadata == {"title": "Field guide"}
    assert section.text == (
        "# Camping\n\nPick a flat spot.\n\n## Fire\n\n- Use the fire ring\n- Keep water near"
        "\n\n| item | weight |\n|---|---|\n| tent | 2 kg |"
    )


def test_epub_chapters_in_reading_order_with_book_metadata(tmp_path):
    from ebooklib import epub

    book = epub.EpubBook()
    book.set_identifier("nw-1")
    book.set_title("Trails of the North")
    book.set_language("en")
    book.add_author("A. Walker")
    chapters = []
    for number, (title, body) in enumerate(
        [("Getting there", "Take the night train."), ("The ridge", "Start before dawn.")], 1
    ):
        chapter = epub.EpubHtml(title=title, file_name=f"ch{number}.xhtml", lang="en")
        chapter.content = f"<h1>{title}</h1><p>{body}</p>"
        book.add_item(chapter)
        chapters.append(chapter)
    book.toc = chapters
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = chapters  # reading order: the two chapters, without the nav page
    path = tmp_path / "trails.epub"
    epub.write_epub(str(path), book)
    first, second = load(path)
    assert first.text == "# Getting there\n\nTake the night train."
    assert second.text == "# The ridge\n\nStart before dawn."
    assert first.metadata == {
        "title": "Trails of the North",
        "author": "A. Walker",
        "language": "en",
        "chapter": 1,
        "chapter_title": "Getting there",
    }


def test_rtf_text_and_title(tmp_path):
    path = tmp_path / "letter.rtf"
    path.write_bytes(
        rb"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0 Helvetica;}}"
        rb"{\info{\title Refund letter}}"
        rb"\f0\fs24 Dear customer,\par We refunded \b 42 \'80\b0  today.\par}"
    )
    [section] = load(path)
    assert section.metadata == {"title": "Refund letter"}
    assert section.text == "Dear customer,\nWe refunded 42 € today."


def test_eml_subject_body_and_headers(tmp_path):
    message = EmailMessage()
    message["From"] = "Ana <ana@example.com>"
    message["To"] = "support@example.com"
    message["Subject"] = "Broken zipper"
    message["Date"] = "Mon, 03 Jun 2024 10:00:00 +0000"
    message.set_content("The zipper of my tent broke after a week.\nOrder 7731.")
    message.add_alternative("<p>The <b>zipper</b> of my tent broke.</p>", subtype="html")
    message.add_attachment(b"\x89PNG...", maintype="image", subtype="png", filename="zip.png")
    path = tmp_path / "ticket.eml"
    path.write_bytes(bytes(message))
    [section] = load(path)
    assert (
        section.text == "# Broken zipper\n\nThe zipper of my tent broke after a week.\nOrder 7731."
    )
    assert section.metadata == {
        "title": "Broken zipper",
        "from": "Ana <ana@example.com>",
        "to": "support@example.com",
        "date": "Mon, 03 Jun 2024 10:00:00 +0000",
        "attachments": ["zip.png"],
    }


def test_other_text_types_by_choice_not_by_renaming(tmp_path):
    path = tmp_path / "setup.py"
    path.write_text("def install():\n    return 'ok'\n", encoding="utf-8")
    assert not supported(path)
    with pytest.raises(NotADocument, match=r"--text-ext \.py"):
        load(path)
    options = LoaderOptions(text_extensions=frozenset({".py"}))
    assert supported(path, options)
    assert load(path, options)[0].text == "def install():\n    return 'ok'\n"
    # Which files are read is not part of a record file's version: old hashes stay valid.
    assert options.as_dict() == LoaderOptions().as_dict()


@pytest.mark.skipif(
    importlib.util.find_spec("langchain_community") is None,
    reason="the optional extra is not installed: pip install 'archivist[community]'",
)
def test_a_community_loader_named_for_a_pattern(tmp_path):
    path = tmp_path / "page.xhtml"
    path.write_text(
        "<html><head><title>Care</title></head><body><p>Dry the tent before storing it.</p>"
        "</body></html>",
        encoding="utf-8",
    )
    spec = "langchain_community.document_loaders:BSHTMLLoader"
    options = LoaderOptions(extra_loaders=(("*.xhtml", spec),))
    [section] = load(path, options)
    assert section.text == "CareDry the tent before storing it."  # BSHTMLLoader's get_text()
    assert section.metadata == {"title": "Care"}
    # Our own HTML loader reads the same file when no loader is named.
    assert load(path)[0].text == "Dry the tent before storing it."


def test_a_json_config_is_skipped_not_failed(tmp_path):
    (tmp_path / "package.json").write_text('{"name": "docs", "version": "1.0.0"}')
    (tmp_path / "list.json").write_text('["a", "b"]')
    for name in ("package.json", "list.json"):
        with pytest.raises(NotADocument):
            load(tmp_path / name)


def zip_with(path, parts: dict[str, bytes], method=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", method) as package:
        for name, data in parts.items():
            package.writestr(name, data)
    return path


def test_office_packages_are_bounded_unpacked_before_parsing(tmp_path, monkeypatch):
    # 40 MB of XML deflates to a few KB: refused from the sizes the zip declares.
    body = b"<w:p>" + b"a" * (MAX_UNPACKED_BYTES + 1024) + b"</w:p>"
    bomb = zip_with(tmp_path / "bomb.docx", {"word/document.xml": body})
    assert bomb.stat().st_size < 200_000
    for suffix in ("docx", "pptx", "odt", "epub"):
        path = bomb.with_suffix(f".{suffix}")
        path.write_bytes(bomb.read_bytes())
        with pytest.raises(LoadError, match="unpacks to 24 MB of text, over the 24 MB limit"):
            load(path)
    # A workbook's sheets are read as a stream, not parsed into a tree: its own, larger
    # limit (shrunk here, so that the test need not write 256 MB).
    from archivist.ingest.loaders import office

    monkeypatch.setattr(office, "MAX_STREAMED_BYTES", 16 * 2**20)
    path = bomb.with_suffix(".xlsx")
    path.write_bytes(bomb.read_bytes())
    with pytest.raises(LoadError, match="unpacks to 24 MB of text, over the 16 MB limit"):
        load(path)


def test_a_named_loader_that_cannot_be_imported_is_refused_before_the_ingest():
    from archivist.ingest.request import _named_loaders
    from archivist.tools.errors import ArchivistError

    with pytest.raises(ArchivistError, match=r"Cannot use --loader \*\.xml=no_such_pkg:Loader"):
        _named_loaders(["*.xml=no_such_pkg:Loader"])
    with pytest.raises(ArchivistError, match="does not name a loader"):
        _named_loaders(["*.xml"])
    assert _named_loaders(["*.txt=archivist.ingest.loaders.community:LoadError"]) == (
        ("*.txt", "archivist.ingest.loaders.community:LoadError"),
    )
