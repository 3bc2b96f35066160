import codecs
import json
import os

import pytest
from conftest import write_files
from samples import HTML_PAGE, make_docx, make_pdf

from archivist.ingest.loaders import (
    MAX_FILE_BYTES,
    LoaderOptions,
    LoadError,
    NotADocument,
    load,
    ocr,
    skip_reason,
    strip_repeated_lines,
)
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import SourceFile, make_documents


def test_markdown_yaml_front_matter_becomes_metadata(tmp_path):
    path = tmp_path / "refund.md"
    path.write_text(
        "---\ntitle: 'Refunds: the rules'\ntags: [refund, policy]\nupdated: 2024-05-01\n"
        "draft: false\n---\n# Refunds\n\nWithin 30 days.",
        encoding="utf-8",
    )
    [section] = load(path)
    assert section.metadata == {
        "title": "Refunds: the rules",
        "tags": ["refund", "policy"],
        "updated": "2024-05-01",
        "draft": False,
    }
    assert section.text == "# Refunds\n\nWithin 30 days."


def test_markdown_with_broken_front_matter_is_refused_with_the_line(tmp_path):
    path = tmp_path / "bad.md"
    path.write_text("---\ntitle: [unclosed\n---\n# Body\n", encoding="utf-8")
    with pytest.raises(LoadError, match="invalid YAML front matter"):
        load(path)


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("bom.txt", codecs.BOM_UTF8 + "Grüße aus Köln.".encode()),
        ("utf16.txt", "Grüße aus Köln.".encode("utf-16")),
        ("utf16be.txt", codecs.BOM_UTF16_BE + "Grüße aus Köln.".encode("utf-16-be")),
    ],
)
def test_text_with_a_byte_order_mark_is_decoded_by_it(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    assert load(path)[0].text == "Grüße aus Köln."


def test_legacy_encoded_text_is_detected(tmp_path):
    text = (
        "Le café coûte trois euros à la gare. Les élèves préfèrent la crème brûlée, "
        "mais le garçon a commandé une tarte aux pommes très sucrée."
    )
    path = tmp_path / "menu.txt"
    path.write_bytes(text.encode("cp1252"))
    assert load(path)[0].text == text


def test_damaged_utf8_is_refused_not_read_as_mojibake(tmp_path):
    path = tmp_path / "配送.txt"
    path.write_bytes("配送需要十个工作日。".encode() + b"\xff\xfe broken" + "关税。".encode())
    with pytest.raises(LoadError, match="damaged UTF-8 text: invalid byte sequence at byte 30"):
        load(path)


def test_binary_content_in_a_text_file_is_refused(tmp_path):
    path = tmp_path / "photo.md"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    with pytest.raises(LoadError, match="binary content"):
        load(path)


def test_empty_and_oversized_files_are_refused_before_reading(tmp_path):
    (tmp_path / "empty.txt").touch()
    with pytest.raises(LoadError, match="empty file"):
        load(tmp_path / "empty.txt")
    huge = tmp_path / "huge.txt"
    with huge.open("wb") as handle:  # a sparse file: no bytes are written
        handle.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(LoadError, match="larger than the 50 MB limit"):
        load(huge)


def test_html_keeps_headings_tables_and_code_and_drops_page_chrome(tmp_path):
    path = tmp_path / "shipping.html"
    path.write_text(HTML_PAGE, encoding="utf-8")
    [section] = load(path)
    assert section.metadata == {"title": "Shipping | Northwind"}
    text = section.text
    assert text.startswith("# Shipping\n\nStandard shipping takes **3–5 business days**")
    assert "## Express" in text and "with UPS." in text
    assert "| Europe | €19.90 |" in text
    assert "```\nGET /v1/orders/{order}/tracking\n```" in text
    for chrome in ("Home", "Shop all", "Imprint", "trackVisitor", "color: red", "console.log"):
        assert chrome not in text
    [doc] = make_documents(SourceFile(path, "shipping.html"), SplitterSettings())
    assert doc.chunks[0].metadata["headings"] == ["Shipping"]


def test_pdf_text_per_page_without_running_headers_and_footers(tmp_path):
    bodies = [
        ["Refunds are paid within 30 days.", "Store credit adds a 10% bonus."],
        ["Returns (with an RMA code) go to Berlin.", "Pick-up costs 3.50."],
        ["Shipping is free over 50 euros.", "Express takes 1-2 days."],
        ["Warranty: two years.", "Summit tents: five years."],
    ]
    pages = [
        ["Northwind Handbook 2024", *body, f"Page {n} of 4"]
        for n, body in enumerate(bodies, start=1)
    ]
    path = tmp_path / "handbook.pdf"
    path.write_bytes(make_pdf(pages, title="Handbook"))
    sections = load(path)
    assert [s.metadata for s in sections] == [{"title": "Handbook", "page": n} for n in range(1, 5)]
    assert [s.text for s in sections] == ["\n".join(body) for body in bodies]


def test_repeated_lines_are_only_removed_at_page_edges():
    pages = [
        "Header\nA\nHeader\nB\nC\nFooter 1",
        "Header\nD\nE\nF\nG\nFooter 2",
        "Header\nH\nI\nJ\nK\nFooter 3",
        "Header\nL\nM\nN\nO\nFooter 4",
    ]
    cleaned = strip_repeated_lines(pages)
    assert cleaned[0] == "A\nHeader\nB\nC"  # a repeated line in the body stays
    assert cleaned[1] == "D\nE\nF\nG"


def test_lines_repeated_with_other_numbers_are_body_not_footers():
    # A price list: every page ends with the same patterns, with its own figures.
    names = ["Summit", "Ridge", "Meadow", "Canyon", "Harbor"]
    pages = [
        f"Tent {name}\nPrice {40 + 7 * n} euros\nIn stock: {3 * n + 1}\nShips in {n + 3} days"
        for n, name in enumerate(names, start=1)
    ]
    assert strip_repeated_lines(pages) == pages


def test_a_pdf_of_short_repeated_pages_keeps_its_text_and_is_never_called_scanned(tmp_path):
    pages = [["Price list", "In stock", f"Ships in {n + 3} days"] for n in range(4)]
    path = tmp_path / "prices.pdf"
    path.write_bytes(make_pdf(pages))
    # The one line identical at the top of every page is a running header; the rest stays.
    assert [s.text for s in load(path)] == [f"In stock\nShips in {n + 3} days" for n in range(4)]
    same = tmp_path / "same.pdf"
    same.write_bytes(make_pdf([["Price list", "In stock"]] * 4))
    assert [s.text for s in load(same)] == ["Price list\nIn stock"] * 4


def test_damaged_and_textless_pdfs_are_refused(tmp_path):
    good = make_pdf([["Some text."]])
    (tmp_path / "cut.pdf").write_bytes(good[: len(good) // 3])
    (tmp_path / "noise.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(2000))
    # A small page: OCR reads every pixel of it, and a blank one holds nothing wherever it is.
    (tmp_path / "scan.pdf").write_bytes(make_pdf([[]], size=(200, 150)))
    for name in ("cut.pdf", "noise.pdf"):
        with pytest.raises(LoadError, match="damaged PDF|no text"):
            load(tmp_path / name)
    # A blank page has no text layer, and OCR finds nothing on it either.
    reason = "no text in the PDF, not even by OCR" if ocr.available() else "no text layer"
    with pytest.raises(LoadError, match=reason) as caught:
        load(tmp_path / "scan.pdf")
    # With OCR, pictures without text are skipped (as an image without text is), not failed;
    # without it, the scan fails naming the install.
    assert isinstance(caught.value, NotADocument) == ocr.available()


def test_docx_headings_lists_and_tables_become_markdown(tmp_path):
    path = make_docx(tmp_path / "warranty.docx")
    [section] = load(path)
    assert section.metadata == {"title": "Warranty handbook"}
    assert section.text == (
        "# Warranty\n\nEvery product has a 2-year warranty from the delivery date.\n\n"
        "## Summit tents\n\nSummit line tents are covered for 5 years.\n\n"
        "- Send the warranty code WX-7731 with the claim.\n\n"
        "| product | years |\n|---|---|\n| boots | 2 |"
    )
    [doc] = make_documents(SourceFile(path, "warranty.docx"), SplitterSettings())
    assert doc.chunks[0].metadata["headings"] == ["Warranty"]


def test_a_damaged_docx_is_refused(tmp_path):
    (tmp_path / "broken.docx").write_bytes(b"PK\x03\x04 not really a zip")
    with pytest.raises(LoadError, match="damaged DOCX"):
        load(tmp_path / "broken.docx")


PRODUCTS = [
    {
        "id": "NW-TX-2290",
        "name": "Trailblazer GTX",
        "body": "A waterproof boot.",
        "price": 189.0,
        "tags": ["boot", "gtx"],
        "dims": {"w": 1},
    },
    {"id": 7, "name": "Summit tent", "body": "A four-season tent.", "price": 499},
]


def test_json_records_with_ids_become_their_own_sources(tmp_path):
    path = tmp_path / "products.json"
    path.write_text(json.dumps({"count": 2, "items": PRODUCTS}), encoding="utf-8")
    sections = load(path)
    assert [(s.key, s.text) for s in sections] == [
        ("NW-TX-2290", "A waterproof boot."),
        ("7", "A four-season tent."),
    ]
    # Scalar fields and lists of scalars are metadata; nested objects are left out.
    assert sections[0].metadata == {
        "id": "NW-TX-2290",
        "name": "Trailblazer GTX",
        "price": 189.0,
        "tags": ["boot", "gtx"],
    }
    docs = make_documents(SourceFile(path, "shop/products.json"), SplitterSettings())
    assert [d.source for d in docs] == ["shop/products.json#NW-TX-2290", "shop/products.json#7"]
    assert [d.chunks[0].chunk_index for d in docs] == [0, 0]


def test_json_text_field_and_id_field_are_configurable(tmp_path):
    path = tmp_path / "products.json"
    path.write_text(json.dumps(PRODUCTS), encoding="utf-8")
    sections = load(path, LoaderOptions(text_field="name", id_field="name"))
    assert [(s.key, s.text) for s in sections] == [
        ("Trailblazer GTX", "Trailblazer GTX"),
        ("Summit tent", "Summit tent"),
    ]
    assert sections[0].metadata["body"] == "A waterproof boot."


def test_records_without_a_text_field_read_as_sentences(tmp_path):
    path = tmp_path / "stock.jsonl"
    path.write_text(
        '{"sku": "WX-1", "name": "Headlamp", "stock": 12, "note": "Ships today!"}\n\n'
        '{"sku": "WX-2", "name": "Power bank", "stock": 0}\n',
        encoding="utf-8",
    )
    sections = load(path)
    assert [s.text for s in sections] == [
        "sku: WX-1. name: Headlamp. stock: 12. note: Ships today!",
        "sku: WX-2. name: Power bank. stock: 0.",
    ]
    assert [s.key for s in sections] == [None, None]
    [doc] = make_documents(SourceFile(path, "stock.jsonl"), SplitterSettings())
    assert doc.source == "stock.jsonl" and len(doc.chunks) == 2
    assert doc.chunks[1].metadata["sku"] == "WX-2"


def test_jsonl_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": 1, "text": "ok"}\n{"id": 2, "text": \n', encoding="utf-8")
    with pytest.raises(LoadError, match="invalid JSON on line 2"):
        load(path)
    path.write_text('{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n', encoding="utf-8")
    with pytest.raises(LoadError, match="duplicate id '1' \\(lines 1 and 2\\)"):
        load(path)


def test_csv_rows_read_as_sentences_with_id_sources(tmp_path):
    path = tmp_path / "prices.csv"
    path.write_text(
        "id;name;price;description\nP1;Trail boot;189.00;Waterproof leather boot.\n"
        "P2;Headlamp;24.90;\n",
        encoding="utf-8",
    )
    sections = load(path)
    assert [(s.key, s.text) for s in sections] == [
        ("P1", "id: P1. name: Trail boot. price: 189.00. description: Waterproof leather boot."),
        ("P2", "id: P2. name: Headlamp. price: 24.90."),
    ]
    assert sections[1].metadata == {"id": "P2", "name": "Headlamp", "price": "24.90"}
    sections = load(path, LoaderOptions(text_field="description"))
    assert [s.text for s in sections] == [
        "Waterproof leather boot.",
        "id: P2. name: Headlamp. price: 24.90.",
    ]


def test_unsupported_files_are_told_apart_by_content(tmp_path):
    write_files(tmp_path, {"logo.png": b"\x89PNG\r\n\x1a\n\0\0", "main.py": "print(1)\n"})
    assert skip_reason(tmp_path / "logo.png") == "binary file of unsupported type '.png'"
    assert skip_reason(tmp_path / "main.py") == (
        "unsupported text type '.py' (add --text-ext .py to ingest it as text)"
    )
