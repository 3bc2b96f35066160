"""Citations to the place: each `[n]` names its source and its page, slide, heading path or
lines, in `ask`, the chat's Sources line and /sources, `--json`, the turn log, MCP results and
the LangChain retriever's documents."""

import json

import pytest
from conftest import run_cli, write_files
from samples import make_pdf

from archivist.agent.citations import check_citations, used_sentences
from archivist.agent.langchain import StoreRetriever
from archivist.render import place_text
from archivist.serving.mcp import StoreTools
from archivist.terminal.chat import marked, sources_line

GUIDE = """# Guide

Archivist answers from your documents.

## Setup

Install it with pip.

### Ports

The server listens on port 8080 by default.
Set ARCHIVIST_PORT to listen on another port.
The health check answers on the same port.

## Backups

Copy the home folder to back up every store.
"""
PAGES = [
    ["Manual", "Welcome to the shop manual."],
    ["Tent care", "Dry the tent completely before you pack it away."],
    ["Stoves", "Clean the stove burner with a soft brush after each trip."],
]


@pytest.fixture
def docs(archivist, tmp_path, home):
    root = write_files(tmp_path / "docs", {"guide.md": "---\ntitle: Guide\n---\n" + GUIDE})
    (root / "manual.pdf").write_bytes(make_pdf(PAGES))
    archivist.ingest([str(root)], "docs", chunk_size=200, chunk_overlap=0)
    archivist.close()
    return root


def ask_json(ollama, home, question: str) -> dict:
    done = run_cli("ask", question, "--store", "docs", "--json", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_pdf_citation_names_its_page(docs, ollama, home):
    turn = ask_json(ollama, home, "How do I clean the stove burner?")
    [citation] = turn["citations"]
    assert citation["source"] == "manual.pdf" and citation["page"] == 3
    assert "lines" not in citation  # a page's extracted text has no file lines
    result = next(r for r in turn["tool_calls"][0]["results"] if r["n"] == citation["n"])
    assert result["page"] == 3 and "stove burner" in result["text"]
    assert sources_line(turn) == f"Sources: [{citation['n']}] manual.pdf p. 3"
    printed = run_cli("ask", "How do I clean the stove burner?", "--store", "docs",
                      ollama_url=ollama.url, home=home)  # fmt: skip
    assert f"Sources: [{citation['n']}] manual.pdf p. 3" in printed.stdout


def test_a_markdown_citation_names_its_heading_path_and_lines(docs, ollama, home):
    turn = ask_json(ollama, home, "Which port does the server listen on?")
    [citation] = turn["citations"]
    assert citation["source"] == "guide.md"
    assert citation["heading"] == "Guide › Setup › Ports"
    first, last = citation["lines"]
    # The lines are the file's own, front matter counted: they hold the passage's text.
    file_lines = (docs / "guide.md").read_text().splitlines()
    cited = next(r for r in turn["tool_calls"][0]["results"] if r["n"] == citation["n"])
    assert "\n".join(file_lines[first - 1 : last]) == cited["text"]
    assert file_lines[first - 1] == "### Ports" and file_lines[last - 1].startswith("The health")
    assert sources_line(turn) == (
        f"Sources: [{citation['n']}] guide.md › Guide › Setup › Ports, lines {first}–{last}"
    )


def test_the_turn_log_mcp_and_the_retriever_carry_the_place(docs, ollama, home, archivist):
    question = "Which port does the server listen on?"
    ask_json(ollama, home, question)
    logged = run_cli("logs", "show", "1", ollama_url=ollama.url, home=home)
    assert "Citations: [1] guide.md › Guide › Setup › Ports, lines " in logged.stdout
    found = StoreTools(archivist.settings, ["docs"]).call("search_docs", {"query": question})
    best = found.structured_content["results"][0]
    assert best["heading"] == "Guide › Setup › Ports" and len(best["lines"]) == 2
    retriever = StoreRetriever(tool=archivist.tool("docs"))
    pages = [d.metadata.get("page") for d in retriever.invoke("stove burner")]
    assert pages[0] == 3
    port = next(d for d in retriever.invoke(question) if d.metadata["source"] == "guide.md")
    assert port.metadata["heading"] == "Guide › Setup › Ports"
    assert port.metadata["lines"] == best["lines"]
    archivist.close()


def test_slides_are_cited_by_number(archivist, tmp_path):
    from pptx import Presentation

    deck = Presentation()
    for title, text in [
        ("Packing", "Pack the heaviest items close to your back and low in the bag."),
        ("Water", "Carry two litres of water per person for every half day of walking."),
    ]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text_frame.text = text
    deck.save(tmp_path / "hiking.pptx")
    archivist.ingest([str(tmp_path / "hiking.pptx")], "deck")
    [best, *_] = archivist.search("litres of water per person", "deck")
    assert best["page"] == 2
    assert place_text(best).startswith("hiking.pptx slide 2")


def test_an_older_store_without_lines_still_cites_its_source_and_heading():
    # Chunks stored before line ranges were recorded have only headings and offsets.
    call = {
        "name": "search_docs",
        "args": {"query": "port"},
        "results": [
            {"n": 1, "rank": 1, "score": 1.0, "source": "guide.md", "chunk_id": "c1",
             "text": "The server listens on port 8080.",
             "metadata": {"headings": ["Guide", "Setup"], "start": 10, "end": 40}},
        ],
    }  # fmt: skip
    [citation], invalid = check_citations("Port 8080 [1].", [call])
    assert citation == {"n": 1, "source": "guide.md", "chunk_id": "c1", "heading": "Guide › Setup"}
    assert not invalid and place_text(citation) == "guide.md › Guide › Setup"
    assert place_text({"source": "a.md", "lines": [4, 4]}) == "a.md, line 4"


def test_the_sentences_an_answer_used_are_found_by_their_words():
    text = (
        "The server listens on port 8080 by default. Set ARCHIVIST_PORT to listen on another "
        "port.\n服务器默认监听 8080 端口。备份时复制主目录。"
    )
    answer = "By default the server listens on port 8080 [1]. 服务器默认监听 8080 端口 [1]。"
    used = used_sentences(text, answer, 1)
    assert [text[s:e] for s, e in used] == [
        "The server listens on port 8080 by default.",
        "服务器默认监听 8080 端口。",
    ]
    assert used_sentences(text, "Bananas are yellow [2].", 1) == []
    assert marked("ab. cd.", [(4, 7)]) == "ab. »cd.«"


def test_sources_in_the_chat_marks_what_the_answer_used(docs, ollama, home):
    result = run_cli(
        "chat", "--store", "docs", ollama_url=ollama.url, home=home,
        stdin="Which port does the server listen on?\n/sources\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    [header] = [line for line in out.splitlines() if line.endswith("· cited")]
    assert header.startswith("[1] guide.md › Guide › Setup › Ports, lines ")
    # The fake answers with the passage's first sentence (its heading line leads it): those
    # are marked, the sentences the answer did not use are not, nor are uncited passages.
    assert "»The server listens on port 8080 by default.«" in out
    assert "Set ARCHIVIST_PORT to listen on another port." in out
    assert "»Set ARCHIVIST_PORT" not in out and "»The health" not in out
    assert out.count("»") == out.count("«") == 2


def test_the_terminal_highlights_the_sentences_used_and_shows_the_whole_place():
    from rich.console import Console

    from archivist.terminal.screen import RichView

    console = Console(record=True, width=60, force_terminal=True, color_system="standard")
    place = {"heading": "A very long heading › And a longer subheading", "lines": [120, 131]}
    passage = {"n": 2, "rank": 1, "score": 0.5, "source": "guide.md", "chunk_id": "c",
               "text": "Used one. Not this.", "metadata": {}, **place}  # fmt: skip
    RichView(console).sources([{**passage, "cited": True, "used": [(0, 9)]}])
    styled = console.export_text(styles=True, clear=False)
    assert "\x1b[1;33mUsed one.\x1b[0m Not this." in styled
    # Wider than the terminal, the title wraps instead of being cut.
    flat = " ".join(console.export_text().split())
    assert f"[2] {place_text(passage)} · cited" in flat
