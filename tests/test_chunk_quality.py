"""Text worth retrieving: no empty table grids, numbered lists kept numbered, ligatures spelt."""

from samples import make_pdf

from archivist.ingest.loaders import load


def test_a_docx_table_keeps_only_rows_and_columns_with_text(tmp_path):
    import docx

    document = docx.Document()
    document.add_paragraph("Order form")
    form = document.add_table(rows=3, cols=3)  # a form's grid, nothing filled in
    del form
    table = document.add_table(rows=3, cols=3)
    table.cell(0, 0).text, table.cell(0, 2).text = "item", "price"
    table.cell(2, 0).text, table.cell(2, 2).text = "tent", "199"
    path = tmp_path / "form.docx"
    document.save(str(path))
    [section] = load(path)
    assert section.text == "Order form\n\n| item | price |\n|---|---|\n| tent | 199 |"
    assert "|  |" not in section.text


def test_a_docx_numbered_list_stays_numbered(tmp_path):
    import docx

    document = docx.Document()
    document.add_paragraph("Returning an item", style="Heading 1")
    document.add_paragraph("Pack the item", style="List Number")
    document.add_paragraph("Print the label", style="List Number")
    document.add_paragraph("Both copies", style="List Number 2")
    document.add_paragraph("Drop it off", style="List Number")
    document.add_paragraph("Refunds take five days.")
    document.add_paragraph("Keep the receipt", style="List Bullet")
    path = tmp_path / "returns.docx"
    document.save(str(path))
    [section] = load(path)
    assert section.text == (
        "# Returning an item\n\n1. Pack the item\n\n2. Print the label\n\n   1. Both copies\n\n"
        "3. Drop it off\n\nRefunds take five days.\n\n- Keep the receipt"
    )


def test_pdf_ligatures_are_spelt_out_and_cjk_punctuation_kept(tmp_path):
    # Byte 0xAE is the "fi" glyph in the font's standard encoding: pypdf extracts U+FB01.
    path = tmp_path / "terms.pdf"
    path.write_bytes(make_pdf([["De\u00aenition of Begri\u00aee"]]))
    [page] = load(path)
    assert page.text.strip() == "Definition of Begrifie"
    assert "\ufb01" not in page.text
    # Only ligatures: full-width CJK punctuation, which NFKC would rewrite, stays as written.
    from archivist.ingest.loaders.pdf import _LIGATURES

    assert "退货，（全角）ＡＢ".translate(_LIGATURES) == "退货，（全角）ＡＢ"


def test_tiny_slides_are_joined_with_their_neighbours(tmp_path):
    from pptx import Presentation

    deck = Presentation()
    for title, body in [
        ("Title Text", None),  # a title slide: a dozen characters
        ("Agenda", None),
        ("Returns", "Items can be returned within 30 days of delivery, unused."),
        ("Questions?", None),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1 if body else 5])
        slide.shapes.title.text = title
        if body:
            slide.placeholders[1].text_frame.text = body
    path = tmp_path / "deck.pptx"
    deck.save(str(path))
    [section] = load(path)
    assert section.text == (
        "# Title Text\n\n# Agenda\n\n# Returns\n\n"
        "Items can be returned within 30 days of delivery, unused.\n\n# Questions?"
    )
    assert section.metadata == {
        "page": 1,
        "page_last": 4,
        "slide": 1,
        "slide_title": "Title Text",
        "slide_last": 4,
    }
