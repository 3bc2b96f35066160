"""The list and read tools over what a store holds: exact counts, and sources read back whole.

A generated corpus in every kind of file (Markdown, CJK text, PDF, DOCX, XLSX) is ingested
with small, overlapping chunks; a plain scan of what the files were written with must find
what `list` with `contains` finds, and reading every source a page at a time must give its
stored text back with no line missing or repeated, numbered as the files number them.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from conftest import run_cli, write_files
from samples import make_pdf

from archivist.agent.documents import (
    DocumentError,
    list_documents,
    make_list_tool,
    make_read_tool,
    read_document,
    resolve_source,
)
from archivist.tools.documents import list_sources, stored_source, titles

NEEDLE = "Quokka"
_LINE_RANGE = re.compile(r'<result n="\d+" source="[^"]*" lines="(\d+)(?:-(\d+))?"')
_RESULT_TEXT = re.compile(r"<result [^>]*>\n(.*?)\n</result>", re.DOTALL)
_REST = re.compile(r'lines="(\d+)-(\d+)"\)\.')


def _markdown(n: int) -> str:
    parts = [f"# Field notes {n}", ""]
    for section in range(6):
        parts += [f"## Part {section}", ""]
        for sentence in range(4):
            animal = NEEDLE.upper() if (section + sentence + n) % 5 == 0 else "wombat"
            parts.append(
                f"Observation {section}.{sentence} of notebook {n} saw a {animal} near the "
                "creek, then the ranger wrote a longer remark about the weather and the trail."
            )
        parts.append("")
    return "\n".join(parts)


CJK = "\n".join(
    ["# 观察记录", ""]
    + [
        f"第{i}段：今天在河边看到了{'quokka' if i % 3 == 0 else '袋熊'}，天气晴朗，"
        "护林员记录了路线和天气的详细情况。" * 2
        for i in range(14)
    ]
)
# Each page's lines differ in words, not only in numbers: the PDF loader drops lines that
# repeat on every page but for their digits (running headers and footers).
ORDINALS = ("first", "second", "third", "fourth")
PDF_PAGES = [
    [f"The {ORDINALS[p - 1]} page opens at marker-{p}."]
    + [
        f"Line {i} of the {ORDINALS[p - 1]} page mentions "
        f"{'a quokka' if (i + p) % 4 == 0 else 'the river'}."
        for i in range(12)
    ]
    for p in range(1, 5)
]


def _docx(path: Path) -> list[str]:
    import docx

    document = docx.Document()
    paragraphs = [
        f"Paragraph {i} about {'the Quokka colony' if i % 3 == 1 else 'the island ferry'}."
        for i in range(15)
    ]
    document.add_heading("Island report", level=1)
    for text in paragraphs:
        document.add_paragraph(text)
    document.save(str(path))
    return ["Island report", *paragraphs]


def _xlsx(path: Path) -> list[str]:
    import openpyxl

    book = openpyxl.Workbook()
    cells = []
    for s, name in enumerate(("Sightings", "Costs")):
        sheet = book.active if s == 0 else book.create_sheet(name)
        sheet.title = name
        sheet.append(["item", "note"])
        for row in range(10):
            note = f"{'quokka' if (row + s) % 4 == 0 else 'gull'} seen at post {row}"
            sheet.append([f"{name}-{row}", note])
            cells.append(note)
    book.save(str(path))
    return cells


@pytest.fixture
def corpus(archivist, fake_models, tmp_path):
    """The corpus ingested into `notes`, with what each file was written with."""
    root = tmp_path / "corpus"
    files = {f"notes/day{n}.md": _markdown(n) for n in range(3)}
    files["notes/没有.md"] = "# 空\n\n什么也没有。\n"
    files["cjk/观察.txt"] = CJK
    write_files(root, files)
    (root / "scan.pdf").write_bytes(make_pdf(PDF_PAGES, title="Scanned notes"))
    written = {name: text for name, text in files.items()}
    written["scan.pdf"] = "\n".join(line for page in PDF_PAGES for line in page)
    written["report.docx"] = "\n".join(_docx(root / "report.docx"))
    written["sightings.xlsx"] = "\n".join(_xlsx(root / "sightings.xlsx"))
    report = archivist.ingest([str(root)], "notes", chunk_size=220, chunk_overlap=90)
    assert not report.failed
    return archivist.store("notes"), root, written


def test_contains_finds_exactly_what_a_scan_of_the_files_finds(corpus):
    store, _, written = corpus
    expected = {
        name: len(re.findall(re.escape(NEEDLE), text, re.IGNORECASE))
        for name, text in written.items()
    }
    expected = {name: n for name, n in expected.items() if n}
    assert len(expected) == 7  # every kind of file holds the word, one file does not

    listed = list_sources(store, contains=NEEDLE.lower())

    assert {e.source: e.match.count for e in listed} == expected
    # Case matters only when asked to: the Markdown writes it in capitals.
    exact = list_sources(store, contains=NEEDLE.upper(), case_sensitive=True)
    assert {e.source for e in exact} == {f"notes/day{n}.md" for n in range(3)}


def test_contains_places_are_the_files_lines_and_pages(corpus):
    store, root, _ = corpus
    for entry in list_sources(store, contains=NEEDLE, places=50):
        for line in entry.match.places:
            assert NEEDLE.lower() in line.text.lower()
            if entry.source.endswith((".md", ".txt")):
                on_disk = (root / entry.source).read_text(encoding="utf-8").split("\n")
                assert on_disk[line.n - 1].rstrip() == line.text.rstrip()
            if entry.source == "scan.pdf":
                page = next(p for p, lines in enumerate(PDF_PAGES, 1) if line.text in lines)
                assert line.page == page


def _read_in_pages(tool, source: str, budget: int) -> tuple[list[tuple[int, str]], int]:
    """Read a source with the tool a page of `budget` tokens at a time, following what each
    page says is left; return the (line, text) pairs shown and the number of pages."""
    shown: list[tuple[int, str]] = []
    args: dict = {"source": source}
    pages = 0
    while True:
        message = tool.invoke({"name": tool.name, "args": args, "id": "1", "type": "tool_call"})
        content, _ = message.artifact.render(1, budget)
        pages += 1
        first, last = _LINE_RANGE.search(content).groups()
        text = html.unescape(_RESULT_TEXT.search(content).group(1))
        text = "\n".join(t for t in text.split("\n") if not re.fullmatch(r"\[page \d+\]", t))
        numbers = range(int(first), int(last or first) + 1)
        assert len(text.split("\n")) == len(numbers), content
        shown += list(zip(numbers, text.split("\n"), strict=True))
        rest = _REST.search(content)
        if rest is None:
            assert "This is the end of" in content
            return shown, pages
        assert rest.group(1) == str(int(last or first) + 1)  # the next page starts right after
        args = {"source": source, "lines": f"{rest.group(1)}-{rest.group(2)}"}


def test_reading_page_by_page_gives_the_stored_text_back(corpus):
    store, root, _ = corpus
    tool = make_read_tool(store)
    for source in store.source_names():
        stored = stored_source(store, source)
        shown, pages = _read_in_pages(tool, source, budget=120)
        assert shown == [(line.n, line.text) for line in stored.lines], source
        assert pages >= 2 or len(stored.text) < 400, source
        if source.endswith((".md", ".txt")):
            on_disk = (root / source).read_text(encoding="utf-8").split("\n")
            for n, text in shown:
                assert on_disk[n - 1].rstrip() == text.rstrip(), (source, n)
            assert stored.file_lines


def test_stored_text_holds_every_line_written_in_order(corpus):
    store, _, written = corpus
    for source in ("scan.pdf", "report.docx", "sightings.xlsx"):
        text = stored_source(store, source).text
        at = 0
        for line in written[source].split("\n"):
            found = text.find(line, at)
            assert found >= 0, (source, line)
            at = found + len(line)
    pdf = stored_source(store, "scan.pdf")
    for line in pdf.lines:
        if marker := re.search(r"marker-(\d)", line.text):
            assert line.page == int(marker.group(1))
    sheets = {line.sheet for line in stored_source(store, "sightings.xlsx").lines}
    assert sheets == {"Sightings", "Costs"}


def test_read_by_page_sheet_heading_and_lines(corpus):
    store, _, _ = corpus
    page = read_document(store, "scan.pdf", page=3)
    assert {line.page for line in page.lines} == {3}
    assert page.lines[0].text == "The third page opens at marker-3."
    sheet = read_document(store, "sightings.xlsx", page="costs")
    assert {line.sheet for line in sheet.lines} == {"Costs"}
    assert read_document(store, "sightings.xlsx", page=2).part == "sheet Costs"
    part = read_document(store, "notes/day1.md", heading="part 2")
    assert part.lines[0].text == "## Part 2"
    assert part.lines[-1].n + 1 == read_document(store, "day1.md", heading="Part 3").lines[0].n
    lines = read_document(store, "day1.md", lines="5-9")
    assert [line.n for line in lines.lines] == [5, 6, 7, 8, 9]
    with pytest.raises(DocumentError, match=r"has no page '9'\. Its pages: 1, 2, 3, 4"):
        read_document(store, "scan.pdf", page=9)
    with pytest.raises(DocumentError, match="lines 900-990 are not in it"):
        read_document(store, "day1.md", lines="900-990")


def test_sources_are_found_the_way_a_small_model_names_them(corpus):
    store, _, _ = corpus
    tool = "read_notes"
    assert resolve_source(store, "notes/day2.md", tool) == ("notes/day2.md", None)
    assert resolve_source(store, "day2.md", tool) == ("notes/day2.md", None)
    assert resolve_source(store, "Scanned notes", tool) == (
        "scan.pdf",
        "'Scanned notes' is the title of scan.pdf.",
    )
    assert resolve_source(store, "sightngs.xlsx", tool)[0] == "sightings.xlsx"
    with pytest.raises(DocumentError, match=r"'notes/' names 4 sources: notes/day0\.md"):
        resolve_source(store, "notes/", tool)
    with pytest.raises(DocumentError) as missing:
        resolve_source(store, "minutes.odt", tool)
    # Nothing close: a store this small names every source (a large one, a spread of them).
    assert "Its sources: cjk/观察.txt, notes/day0.md, " in str(missing.value)
    assert "scan.pdf" in str(missing.value)
    assert str(missing.value).endswith("Call list_notes to see every source's name.")


def test_listing_pages_say_the_total_and_how_to_see_more(corpus):
    store, _, _ = corpus
    tool = make_list_tool(store)
    message = tool.invoke(
        {"name": tool.name, "args": {"contains": "quokka"}, "id": "1", "type": "tool_call"}
    )
    content, passages = message.artifact.render(4, 70)
    assert '<source_list tool="list_notes" total="7" contains="quokka"' in content
    total = sum(e.match.count for e in list_documents(store, contains="quokka"))
    assert f"7 sources contain 'quokka', {total} times in all" in content
    assert 'For more call list_notes(contains="quokka", page=2).' in content
    assert [p["source"] for p in passages] == sorted(p["source"] for p in passages)
    second = tool.invoke(
        {
            "name": tool.name,
            "args": {"contains": "quokka", "page": 2},
            "id": "2",
            "type": "tool_call",
        }
    )
    more, later = second.artifact.render(4, 70)
    assert not {p["source"] for p in later} & {p["source"] for p in passages}
    assert "Shown: " in more or "</source_list>" in more


def test_cli_sources_contains_and_read(corpus, archivist, settings, home):
    url = settings.ollama_host
    archivist.close()  # the commands open the store themselves
    in_pdf = sum(line.count("quokka") for page in PDF_PAGES for line in page)
    listed = run_cli(
        "sources", "--store", "notes", "--contains", "QUOKKA", "--json", ollama_url=url, home=home
    )
    assert listed.returncode == 0, listed.stderr
    found = {e["source"]: e["count"] for e in json.loads(listed.stdout)}
    assert found["scan.pdf"] == in_pdf and len(found) == 7
    text = run_cli("read", "--store", "notes", "scan.pdf", "--page", "2", ollama_url=url, home=home)
    assert text.returncode == 0, text.stderr
    assert text.stdout.startswith("--- page 2 ---\n")
    assert "The second page opens at marker-2." in text.stdout
    assert "marker-3" not in text.stdout
    wrong = run_cli(
        "read", "--store", "notes", "scan.pdf", "--page", "7", ollama_url=url, home=home
    )
    assert wrong.returncode == 1
    assert "scan.pdf has no page '7'. Its pages: 1, 2, 3, 4" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    both = run_cli(
        "read",
        "--store",
        "notes",
        "day1.md",
        "--page",
        "1",
        "--lines",
        "1-3",
        ollama_url=url,
        home=home,
    )
    assert both.returncode == 1 and "--lines and --page both choose a part" in both.stderr


def test_contains_ignores_case_as_python_does_inside_and_outside_ascii(archivist, tmp_path):
    """Case ignored, a needle is found where `re.IGNORECASE` finds it in the stored text:
    in ASCII text (searched lower-cased) and in text with letters whose case rules are not
    ASCII's (the long s, the Kelvin sign, the dotted and dotless i)."""
    root = tmp_path / "case"
    write_files(
        root,
        {
            "plain.md": "# Sizes\n\nSIZE size Size, kelvin KELVIN; istanbul ISTANBUL.\n" * 3,
            "letters.md": "# Sizes\n\nſize \u212aelvin İstanbul ıstanbul SIZE.\n" * 3,
        },
    )
    report = archivist.ingest([str(root)], "case", chunk_size=60, chunk_overlap=20)
    assert not report.failed
    store = archivist.store("case")
    texts = {name: stored_source(store, name).text for name in ("plain.md", "letters.md")}
    for needle in ("size", "SIZE", "kelvin", "istanbul", "ſ", "\u212a", "İ", "ı", "s"):
        for case_sensitive in (False, True):
            flags = 0 if case_sensitive else re.IGNORECASE
            expected = {
                name: n
                for name, text in texts.items()
                if (n := len(re.findall(re.escape(needle), text, flags)))
            }
            listed = list_sources(store, contains=needle, case_sensitive=case_sensitive)
            assert {e.source: e.match.count for e in listed} == expected, (needle, case_sensitive)
    # The long s and the Kelvin sign count as "s" and "k" there, as they do for `re`.
    assert {e.source for e in list_sources(store, contains="kelvin")} == {
        "plain.md",
        "letters.md",
    }


@pytest.mark.parametrize("overlap", [0, 25])
def test_contains_finds_text_that_runs_across_chunks(archivist, tmp_path, overlap):
    """A needle is counted where it runs from one chunk into the next (over their overlap,
    or over the blank between them), and in text without spaces split mid-word: for every
    stretch of each source's stored text as a needle, the listing counts what `re` counts
    in the stored text."""
    root = tmp_path / "across"
    lines = [f"Line {i} tells the ranger about the Creek and the trail north." for i in range(9)]
    write_files(
        root,
        {
            "prose.md": "# Across\n\n" + "\n".join(lines) + "\n\nThe end of it.\n",
            "cjk.txt": "河边的袋熊在早上出现，护林员记录了天气和路线。" * 6,
        },
    )
    report = archivist.ingest([str(root)], "across", chunk_size=70, chunk_overlap=overlap)
    assert not report.failed
    store = archivist.store("across")
    texts = {name: stored_source(store, name).text for name in ("prose.md", "cjk.txt")}
    assert all(store.sources()[name].chunks > 3 for name in texts)
    needles = {" the", "\nLine", "E end", "早上出"}
    for text in texts.values():
        needles |= {text[i : i + n] for n in (9, 23) for i in range(0, len(text) - n, 5)}
    for needle in sorted(needles):
        if not needle.strip():
            continue
        expected = {
            name: n
            for name, text in texts.items()
            if (n := len(re.findall(re.escape(needle), text, re.IGNORECASE)))
        }
        listed = list_sources(store, contains=needle.swapcase())
        assert {e.source: e.match.count for e in listed} == expected, needle


def test_headings_with_an_anchor_give_titles_without_it(archivist, fake_models, tmp_path):
    # VitePress, mkdocs and Pandoc end a heading with its anchor: `## 图示 {#diagram}`.
    page = (
        "# 生命周期 {#lifecycle}\n\nVue 组件实例会经历一个生命周期。\n\n"
        "## 图示 { #diagram .wide }\n\n下面是实例生命周期的图表。\n\n"
        "## Sets {of things}\n\nBraces that are not an attribute list stay.\n"
    )
    write_files(tmp_path / "docs", {"lifecycle.md": page})
    archivist.ingest([str(tmp_path / "docs")], "vue")
    store = archivist.store("vue")
    [listed] = list_sources(store)
    assert listed.title == "生命周期"
    [found] = list_sources(store, contains="图表")
    assert found.title == "生命周期"
    assert titles(store) == {"lifecycle.md": "生命周期"}
    assert [title for _, _, title in stored_source(store, "lifecycle.md").headings()] == [
        "生命周期",
        "图示",
        "Sets {of things}",
    ]
    part = read_document(store, "lifecycle.md", heading="图示")
    assert [line.text for line in part.lines][:3] == [
        "## 图示 { #diagram .wide }",
        "",
        "下面是实例生命周期的图表。",
    ]
