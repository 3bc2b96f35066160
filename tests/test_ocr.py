"""Scans and pictures read by OCR (the `ocr` extra), and what is said without it."""

import pytest
from ocr_samples import TEXTS, missing_fonts, render, save_scan

from archivist.ingest.loaders import LoadError, NotADocument, load, ocr
from archivist.tools.errors import install_command

pytestmark = [
    pytest.mark.skipif(not ocr.available(), reason="the ocr extra is not installed"),
    pytest.mark.skipif(bool(missing_fonts()), reason=f"fonts missing: {missing_fonts()}"),
]


@pytest.mark.parametrize("language", ["en", "zh"])
def test_an_image_of_text_is_read_line_by_line(tmp_path, language):
    path = tmp_path / "notice.png"
    render(TEXTS[language], language).save(path)
    [section] = load(path)
    assert section.text == "\n".join(TEXTS[language])
    assert section.metadata == {"ocr": True}


def test_a_scanned_pdf_is_read_page_by_page(tmp_path):
    path = tmp_path / "scan.pdf"
    first, second = render(TEXTS["en"][:2], "en"), render(TEXTS["zh"][:2], "zh")
    save_scan([first, second], path)
    pages = load(path)
    assert [(p.metadata["page"], p.metadata["ocr"]) for p in pages] == [(1, True), (2, True)]
    assert [p.text for p in pages] == ["\n".join(TEXTS["en"][:2]), "\n".join(TEXTS["zh"][:2])]


def test_a_scan_past_the_page_limit_fails_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(ocr, "MAX_OCR_PAGES", 1)
    path = tmp_path / "long-scan.pdf"
    page = render(TEXTS["en"][:1], "en")
    save_scan([page, page], path)
    with pytest.raises(LoadError, match="a scan of 2 pages, over the 1-page OCR limit"):
        load(path)


def test_pictures_without_text_are_skipped_not_failed(tmp_path):
    from PIL import Image

    Image.new("RGB", (400, 300), "white").save(tmp_path / "blank.png")
    Image.new("RGB", (16, 16), "red").save(tmp_path / "icon.png")
    with pytest.raises(NotADocument, match="no text found in the image"):
        load(tmp_path / "blank.png")
    with pytest.raises(NotADocument, match="an image too small to hold text"):
        load(tmp_path / "icon.png")


def test_without_the_extra_images_are_skipped_and_scans_fail_naming_the_install(
    archivist, tmp_path, monkeypatch
):
    monkeypatch.setattr(ocr, "available", lambda: False)
    folder = tmp_path / "scans"
    folder.mkdir()
    render(TEXTS["en"], "en").save(folder / "notice.png")
    save_scan([render(TEXTS["en"], "en")], folder / "scan.pdf")
    (folder / "readme.md").write_text("# Scans\n\nThe shop's scanned letters.\n")
    # Loaded in this process (no budget, no loading child), where `available` is patched.
    report = archivist.ingest([str(folder)], "scans", load_timeout=0)
    assert [s["source"] for s in report.stored] == ["readme.md"]
    assert report.skipped == [
        {
            "source": "notice.png",
            "reason": f"an image: its text is read by OCR, which needs: {install_command('ocr')}",
        }
    ]
    assert report.failed == [
        {
            "source": "scan.pdf",
            "reason": "no text layer in the PDF (a scan): its pages are read by OCR, which "
            f"needs: {install_command('ocr')}",
        }
    ]


def test_ocr_work_reports_its_pages_and_chunks_keep_the_page_they_came_from(archivist, tmp_path):
    from archivist.tools.progress import Recognised

    folder = tmp_path / "scans"
    folder.mkdir()
    first, second = render(TEXTS["en"][:2], "en"), render(TEXTS["zh"][:2], "zh")
    save_scan([first, second], folder / "scan.pdf")
    events = []
    archivist.ingest([str(folder)], "scans", on_progress=events.append)
    assert [e for e in events if isinstance(e, Recognised)] == [
        Recognised("scan.pdf", 1, 2),
        Recognised("scan.pdf", 2, 2),
    ]
    chunks = list(archivist.store("scans").payloads())
    pages = {c["metadata"]["page"]: c["text"] for c in chunks}
    assert set(pages) == {1, 2}
    assert TEXTS["en"][0] in pages[1] and TEXTS["zh"][0] in pages[2]
    assert all(c["metadata"]["ocr"] is True for c in chunks)
