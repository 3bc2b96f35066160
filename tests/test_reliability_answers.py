"""Hostile answers and inputs outside the crawler: a relevance model's malformed answers,
PDF pages huge in points, scans interrupted, Latin-1 text without a declared charset."""

import json
import math

import pytest
from ollama._types import ChatResponse

from archivist.agent.rerank import Reranker
from archivist.ollama import Ollama
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError

RERANKER = "qwen2.5:3b"


def answer(logprobs) -> ChatResponse:
    """A relevance answer as the Ollama client parses it (so wrong types fail there)."""
    return ChatResponse.model_validate(
        {"model": RERANKER, "message": {"role": "assistant", "content": "yes"}, "done": True,
         "logprobs": logprobs}
    )  # fmt: skip


def entry(token: str, logprob, top=()) -> dict:
    return {"token": token, "logprob": logprob, "top_logprobs": list(top)}


def passages(*texts: str) -> list[dict]:
    return [
        {"rank": n, "score": 1.0 / n, "source": t, "chunk_id": t, "text": t, "metadata": {}}
        for n, t in enumerate(texts, start=1)
    ]


def scorer_answering(answers: dict):
    """The real relevance scorer, its Ollama client answering `answers[passage]`: a
    ChatResponse to parse, or an exception the client raises."""

    class Wire:
        host = "http://127.0.0.1:9"

        def show(self, model):
            return {"capabilities": ["completion"], "model_info": {}, "parameters": ""}

        def chat(self, model, messages, **options):
            text = messages[-1]["content"]
            for key, reply in answers.items():
                if key in text:
                    if callable(reply):
                        return reply()
                    if isinstance(reply, BaseException):
                        raise reply
                    return reply
            return answer([entry("yes", math.log(0.9), [entry("yes", math.log(0.9))])])

    ollama = Ollama(Settings(ollama_host=Wire.host), wire=Wire())
    return ollama.relevance_scorer(RERANKER)


def test_malformed_relevance_answers_leave_their_passage_unscored(monkeypatch):
    def good(p: float) -> ChatResponse:
        top = [entry("yes", math.log(p)), entry("no", math.log(1 - p))]
        return answer([entry("yes", math.log(p), top)])

    score = scorer_answering(
        {
            "Alpha": json.JSONDecodeError("Expecting value", "<html>", 0),  # not JSON
            "Bravo": answer([entry("yes", 1000.0, [entry("yes", 1000.0)])]),  # exp overflows
            "Charlie": lambda: answer([entry("yes", "very")]),  # wrong type: fails parsing
            "Delta": answer([entry("yes", math.nan, [entry("yes", math.nan)])]),
            "Echo": good(0.3),
            "Foxtrot": good(0.8),
        },
    )
    ranked = Reranker(score, RERANKER)(
        "q", passages("Alpha", "Bravo", "Charlie", "Delta", "Echo", "Foxtrot"), 6
    )
    assert [(r["text"], r["rerank_score"]) for r in ranked] == [
        ("Foxtrot", 0.8),
        ("Echo", 0.3),
        ("Alpha", None),
        ("Bravo", None),
        ("Charlie", None),
        ("Delta", None),
    ]
    json.dumps(list(ranked), allow_nan=False)  # valid JSON: never a NaN


def test_a_relevance_model_whose_every_answer_is_unreadable_is_named(monkeypatch):
    refusal = json.JSONDecodeError("Expecting value", "<", 0)
    score = scorer_answering({"Alpha": refusal, "Bravo": refusal})
    with pytest.raises(ArchivistError) as refused:
        Reranker(score, RERANKER)("q", passages("Alpha", "Bravo"), 2)
    assert refused.value.message == (
        f"The rerank model '{RERANKER}' gave no readable relevance score (JSONDecodeError: "
        "Expecting value: line 1 column 1 (char 0))."
    )


def test_a_pdf_page_huge_in_points_is_rendered_within_the_pixel_bound(tmp_path, monkeypatch):
    pytest.importorskip("pypdfium2")
    import pypdfium2
    from pypdf import PdfWriter

    from archivist.ingest.loaders import LoadError, load, ocr

    writer = PdfWriter()
    writer.add_blank_page(width=14_400, height=14_400)  # 200 inches square
    writer.add_blank_page(width=1_000_000, height=1_000_000)
    writer.add_blank_page(width=612, height=792)  # a letter page: rendered at 144 dpi
    path = tmp_path / "huge.pdf"
    with path.open("wb") as handle:
        writer.write(handle)
    assert path.stat().st_size < 1000
    rendered = []
    render = pypdfium2.PdfPage.render

    def measured(page, scale=1, **kwargs):
        width, height = page.get_size()
        rendered.append((round(width * scale), round(height * scale)))
        return render(page, scale=scale, **kwargs)

    monkeypatch.setattr(pypdfium2.PdfPage, "render", measured)
    monkeypatch.setattr(ocr, "read_picture", lambda picture: "")
    with pytest.raises(LoadError):  # blank pages: no text, by OCR either
        load(path)
    assert rendered[2] == (1224, 1584)
    assert all(w * h <= ocr.MAX_RENDER_PIXELS * 1.001 for w, h in rendered)
    assert rendered[0] == (4000, 4000) and rendered[1] == (4000, 4000)


def test_pictures_found_without_text_are_not_read_again_after_an_interruption(
    fake_models, archivist, tmp_path, monkeypatch
):
    pytest.importorskip("rapidocr")
    from PIL import Image

    from archivist.ingest.loaders import ocr

    folder = tmp_path / "scans"
    folder.mkdir()
    for n in range(40):
        Image.new("RGB", (64, 64), "white").save(folder / f"blank{n:02}.png")
    (folder / "note.md").write_text("# Note\n\nThe only text here.")
    read = []
    stop = [20]

    def recognise(picture):
        read.append(picture)
        if len(read) == stop[0]:
            stop[0] = 0
            raise KeyboardInterrupt  # Ctrl-C in the middle of the second batch
        return ""

    monkeypatch.setattr(ocr, "read_picture", recognise)
    with pytest.raises(KeyboardInterrupt):
        archivist.ingest([str(folder)], "s")
    read.clear()
    report = archivist.ingest([str(folder)], "s")
    # The first batch's 16 pictures were recorded as they were found: not read again.
    assert len(read) == 40 - 16
    assert len(report.skipped) == 40
    assert {s["reason"] for s in report.skipped} == {"no text found in the image"}
    read.clear()
    archivist.ingest([str(folder)], "s")
    assert read == []


FRENCH = (
    "La crème brûlée est servie à la fin du repas. Où est le café? Très élevé, déjà vu, "
    "garçon, naïve, Noël, cœur."
)


@pytest.mark.parametrize("codec", ["latin-1", "cp1252"])
def test_latin_1_french_without_a_charset_is_read_as_written(codec, tmp_path):
    from archivist.ingest.loaders import decode_text, load

    data = FRENCH.replace("œ", "oe" if codec == "latin-1" else "œ").encode(codec)
    text = decode_text(data)
    assert "crème brûlée est servie à la fin" in text and "Noël" in text
    (tmp_path / "menu.txt").write_bytes(data)
    assert "crème brûlée" in load(tmp_path / "menu.txt")[0].text


def test_other_code_pages_are_still_told_apart():
    from archivist.ingest.loaders import decode_text

    assert decode_text("Zażółć gęślą jaźń, powiedział.".encode("cp1250")).startswith("Zażółć")
    assert decode_text("Привет мир, как дела сегодня?".encode("cp1251")).startswith("Привет")


def test_a_web_page_in_latin_1_without_a_charset_is_read_as_written():
    from archivist.ingest.web import _decode_html

    body = f"<html><body><p>{FRENCH}</p></body></html>".replace("œ", "oe").encode("latin-1")
    assert "crème brûlée" in _decode_html(body, {"content-type": "text/html"})
