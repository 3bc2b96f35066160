"""Agent turns with the list and read tools, on the wire of the fake Ollama: what the model was
offered, what it called with which arguments, what came back, and what the answer cites."""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest
from fake_ollama import CONFUSED_MODEL, SMALL_MODELS

from archivist.agent.turn import run_turn
from archivist.app import Archivist
from archivist.tools.documents import stored_source

SHOP = Path(__file__).resolve().parents[1] / "examples" / "shop"


def _tool_replies(ollama) -> list[str]:
    last = ollama.requests_to("/api/chat")[-1]
    return [m["content"] for m in last["messages"] if m["role"] == "tool"]


def test_search_only_is_the_default_toolset(archivist, shop_store, ollama):
    run_turn(archivist.agent([shop_store]), "Which documents mention 'refund'?")
    offered = [t["function"]["name"] for t in ollama.requests_to("/api/chat")[0]["tools"]]
    assert offered == ["search_shop_docs"]


def test_a_turn_lists_the_sources_that_contain_a_text_with_exact_counts(
    archivist, shop_store, ollama
):
    setup = archivist.agent([shop_store], tools="all")
    result = run_turn(setup, "Which documents mention 'refund'?")

    first = ollama.requests_to("/api/chat")[0]
    assert [t["function"]["name"] for t in first["tools"]] == [
        "search_shop_docs",
        "list_shop_docs",
        "read_shop_docs",
    ]
    assert "call its list_ tool" in first["messages"][0]["content"]
    [call] = result["tool_calls"]
    assert call["name"] == "list_shop_docs"
    assert call["args"] == {"contains": "refund"}
    scan = {
        f.name: len(re.findall("refund", f.read_text(encoding="utf-8"), re.IGNORECASE))
        for f in sorted(SHOP.iterdir())
    }
    expected = {name: n for name, n in scan.items() if n}
    assert [r["source"] for r in call["results"]] == sorted(expected)
    assert [r["score"] for r in call["results"]] == [float(n) for _, n in sorted(expected.items())]
    [reply] = _tool_replies(ollama)
    total = sum(expected.values())
    assert reply.startswith(
        f'<source_list tool="list_shop_docs" total="{len(expected)}" contains="refund" '
        f'occurrences="{total}">'
    )
    assert f"{len(expected)} sources contain 'refund', {total} times in all" in reply
    # The answer gives the exact counts and cites every source listed.
    assert result["answer"].startswith(f"{len(expected)} sources contain 'refund'")
    assert [c["source"] for c in result["citations"]] == sorted(expected)
    assert result["invalid_citations"] == []


def test_a_turn_reads_a_document_a_page_of_its_budget_at_a_time(settings, shop_store, ollama):
    small = Archivist(settings.with_overrides(num_ctx=3584))
    try:
        setup = small.agent([shop_store], tools="all")
        result = run_turn(setup, "Summarize the refund policy")
        stored = stored_source(small.store(shop_store), "refund.md")
    finally:
        small.close()

    reads = result["tool_calls"]
    assert [c["name"] for c in reads] == ["read_shop_docs"] * len(reads)
    assert len(reads) == 2
    # The title named the document; each next page is asked for as the last one said.
    assert reads[0]["args"] == {"source": "refund policy"}
    replies = _tool_replies(ollama)
    assert "Note" not in replies[0].split("<result")[0] or "title of refund.md" in replies[0]
    shown: list[int] = []
    for call, reply, following in zip(reads, replies, [*reads[1:], None], strict=True):
        [page] = call["results"]
        assert page["source"] == "refund.md"
        first, last = page["metadata"]["lines"]
        assert f'lines="{first}-{last}"' in reply if first != last else f'lines="{first}"' in reply
        shown += range(first, last + 1)
        if following is not None:
            rest = following["args"]["lines"]
            assert rest.startswith(f"{last + 1}-")
            assert f'call read_shop_docs(source="refund.md", lines="{rest}")' in reply
        else:
            assert "This is the end of" in reply
    assert shown == [line.n for line in stored.lines]  # no line missing, none twice
    # Every page was sized to the room the window left: none alone near the window.
    assert all(len(reply) < 2048 * 2 for reply in replies)
    assert [c["n"] for c in result["citations"]] == [c["results"][0]["n"] for c in reads]
    assert {c["source"] for c in result["citations"]} == {"refund.md"}
    assert result["citations"][0]["lines"] == reads[0]["results"][0]["metadata"]["lines"]


def test_a_turn_reads_around_a_passage_it_found(archivist, shop_store, ollama):
    setup = archivist.agent([shop_store], tools="all")
    result = run_turn(setup, "Find the refund window, then what comes after [1]?")

    search, read = result["tool_calls"]
    assert search["name"] == "search_shop_docs"
    cited = search["results"][0]
    assert read["name"] == "read_shop_docs"
    assert read["args"] == {"around": 1}  # the turn's passages are never shown as arguments
    [page] = read["results"]
    assert page["source"] == cited["source"] and page["n"] == len(search["results"]) + 1
    # The reading starts a few lines before the passage and goes on past it.
    first, last = page["metadata"]["lines"]
    assert first <= cited["lines"][0] <= cited["lines"][1] <= last
    reply = _tool_replies(ollama)[-1]
    assert 'part="around [1]"' in reply
    assert cited["text"].split("\n")[0] in html.unescape(reply)
    assert f"[{page['n']}]" in result["answer"]
    assert any(c["n"] == page["n"] and c["source"] == cited["source"] for c in result["citations"])


def test_around_a_number_the_turn_does_not_have_is_an_error_to_act_on(archivist, shop_store):
    from archivist.agent.documents import make_read_tool

    tool = make_read_tool(archivist.store(shop_store))
    from archivist.agent.steps import run_tool

    record, content = run_tool(tool, {"around": 4}, 1, None, [])
    assert record["error"].startswith("There is no passage [4] in this conversation turn")
    assert content.endswith("Call read_shop_docs again with corrected arguments.")


@pytest.mark.parametrize("shape", ["json", "pythonic", "tagged"])
def test_a_list_call_written_as_text_is_recovered(archivist, shop_store, ollama, shape):
    [spec] = [m for m in SMALL_MODELS if m.name == f"small-{shape}:1b"]
    ollama.add_model(spec)
    setup = archivist.agent([shop_store], spec.name, tools="all")
    result = run_turn(setup, "How many documents mention 'warranty'?")
    [call] = result["tool_calls"]
    assert call["name"] == "list_shop_docs" and call["from_text"]
    assert call["args"] == {"contains": "warranty"}
    assert result["answer"].startswith(f"{len(call['results'])} sources contain 'warranty'")


def test_a_wrong_tool_name_is_corrected_with_the_three_tools_named(archivist, shop_store, ollama):
    [spec] = [m for m in SMALL_MODELS if m.name == "small-wrongname:1b"]
    ollama.add_model(spec)
    result = run_turn(archivist.agent([shop_store], spec.name, tools="all"), "Summarize refund.md")
    wrong, right = result["tool_calls"][:2]
    assert wrong["error"] == "unknown tool"
    told = _tool_replies(ollama)[0]
    assert "read_shop_docs(source?: string, lines?: string/array" in told
    assert right["name"] == "read_shop_docs" and right["args"] == {"source": "refund.md"}


def test_a_confused_small_model_picks_worse_among_more_tools(archivist, shop_store, ollama):
    ollama.add_model(CONFUSED_MODEL)
    question = "Which page of the document covers the warranty?"
    alone = run_turn(archivist.agent([shop_store], CONFUSED_MODEL.name), question)
    assert [c["name"] for c in alone["tool_calls"]] == ["search_shop_docs"]
    among = run_turn(archivist.agent([shop_store], CONFUSED_MODEL.name, tools="all"), question)
    names = [c["name"] for c in among["tool_calls"]]
    assert names[0] != "search_shop_docs" and "error" in among["tool_calls"][0]
    assert names[-1] == "search_shop_docs"  # told it was wrong, it searched: one step more


def test_a_call_written_with_a_plain_tool_name_runs_as_the_one_tool_it_fits():
    from archivist.agent.textcalls import match_tool

    offered = {"search_shop_docs": {}, "list_shop_docs": {}, "read_shop_docs": {}}
    assert match_tool("read", offered) == "read_shop_docs"
    assert match_tool("functions.list", offered) == "list_shop_docs"
    assert match_tool("search", offered) == "search_shop_docs"
    assert match_tool("docs", offered) is None  # all three hold it: no guess
    assert match_tool("read", {**offered, "read_hr": {}}) is None


def test_without_tool_calling_a_counting_question_is_listed_before_the_answer(
    archivist, shop_store, ollama
):
    setup = archivist.agent([shop_store], "gemma-notools:1b", tools="all")
    assert setup.mode == "retrieve-then-answer"
    result = run_turn(setup, "How many documents mention 'voucher'?")

    listed, searched = result["tool_calls"]
    assert listed["name"] == "list_shop_docs" and listed["args"] == {"contains": "voucher"}
    expected = [f.name for f in sorted(SHOP.iterdir()) if "voucher" in f.read_text().lower()]
    assert [r["source"] for r in listed["results"]] == expected
    assert searched["name"] == "search_shop_docs"
    assert searched["results"][0]["n"] == len(expected) + 1
    [request] = ollama.requests_to("/api/chat")
    sent = html.unescape(request["messages"][-1]["content"])
    assert f"sources containing 'voucher': {len(expected)} sources" in sent
    assert result["citations"][0]["source"] == expected[0]


def test_without_tool_calling_a_summary_reads_the_named_document(archivist, shop_store):
    setup = archivist.agent([shop_store], "gemma-notools:1b", tools="all")
    result = run_turn(setup, "Summarize the warranty document")
    read = result["tool_calls"][0]
    assert read["name"] == "read_shop_docs" and read["args"] == {"source": "warranty document"}
    assert read["results"][0]["source"] == "warranty.md"
    # A plain question is searched only.
    plain = run_turn(setup, "How long is the warranty?")
    assert [c["name"] for c in plain["tool_calls"]] == ["search_shop_docs"]


def test_the_chat_shows_a_list_or_read_with_its_arguments_and_a_searchs_source():
    from archivist.render import tool_line

    read = {"name": "read_x", "args": {"source": "a.md", "lines": "3-9"}, "results": [{}]}
    assert tool_line({**read, "kept": [1], "latency_ms": 3.2}) == (
        'read_x(source="a.md", lines="3-9") · 1 result · 3 ms'
    )
    search = {"name": "search_x", "args": {"query": "q"}, "results": [], "latency_ms": 1.0}
    assert tool_line(search) == 'search_x("q") · 0 results · 1 ms'
    # A search limited to a source says which: its results come from there alone.
    limited = {**search, "args": {"query": "q", "source": "form"}}
    assert tool_line(limited) == 'search_x("q", source="form") · 0 results · 1 ms'
    assert tool_line({**search, "args": {"query": "q", "source": ""}}) == tool_line(search)
