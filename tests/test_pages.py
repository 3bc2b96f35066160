"""Every chunk says where in its document it is, for citations: a PDF's page, a slide, a sheet."""

from samples import make_pdf

from archivist.ingest.request import IngestRequest

LONG = " ".join(f"Sentence {n} about the widget and its parts." for n in range(60))


def stored(archivist, store="docs") -> list[dict]:
    return list(archivist.store(store).payloads())


def by_source(payloads: list[dict], source: str) -> list[dict]:
    return sorted((p for p in payloads if p["source"] == source), key=lambda p: p["chunk_index"])


def test_every_chunk_of_a_pdf_a_deck_and_a_workbook_carries_its_page_or_sheet(archivist, tmp_path):
    import openpyxl
    from pptx import Presentation

    folder = tmp_path / "kb"
    folder.mkdir()
    # A PDF whose pages are long enough to give several chunks each.
    (folder / "manual.pdf").write_bytes(
        make_pdf(
            [
                [f"Page one. {LONG[i : i + 90]}" for i in range(0, len(LONG), 90)],
                [f"Page two. {LONG[i : i + 90]}" for i in range(0, len(LONG), 90)],
            ]
        )
    )
    deck = Presentation()
    for number in (1, 2, 3):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Topic {number}"
        slide.placeholders[1].text_frame.text = f"Slide {number}: " + LONG[: 200 * number]
    deck.save(str(folder / "talk.pptx"))
    book = openpyxl.Workbook()
    book.active.title = "Prices"
    book.active.append(["item", "price"])
    book.active.append(["tent", 199])
    stock = book.create_sheet("Stock")
    stock.append(["item", "count"])
    stock.append(["stove", 12])
    book.save(str(folder / "shop.xlsx"))

    archivist.ingest(IngestRequest.build([str(folder)], "docs", chunk_size=400))
    payloads = stored(archivist)

    pdf = by_source(payloads, "manual.pdf")
    assert len(pdf) > 2
    for chunk in pdf:
        page = chunk["metadata"]["page"]
        assert page in (1, 2)
        # The page named is the page the text is on.
        assert ("Page two." in chunk["text"]) <= (page == 2)
        assert ("Page one." in chunk["text"]) <= (page == 1)
    assert {c["metadata"]["page"] for c in pdf} == {1, 2}

    slides = by_source(payloads, "talk.pptx")
    assert slides
    for chunk in slides:
        page = chunk["metadata"]["page"]
        assert chunk["metadata"]["slide"] == page
        assert f"Topic {page}" in chunk["metadata"]["headings"]
    assert {c["metadata"]["page"] for c in slides} == {1, 2, 3}

    sheets = by_source(payloads, "shop.xlsx")
    assert {c["metadata"]["sheet"] for c in sheets} == {"Prices", "Stock"}
    for chunk in sheets:
        assert ("stove" in chunk["text"]) == (chunk["metadata"]["sheet"] == "Stock")
