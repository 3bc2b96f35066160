"""`archivist chat` in a pseudo-terminal: streaming, tool lines, sources, slash commands."""

import re

from chat_terminal import TOOL_LINE, ask, chat_requests, leave, spawn_chat

from archivist.render import place_text

REFUND_Q = "How many days do I have to ask for a refund?"


def test_a_question_streams_an_answer_with_its_tool_line_and_sources(ollama, home, store):
    child = spawn_chat("--store", store, ollama_url=ollama.url, home=home)
    out = ask(child, REFUND_Q)
    lines = [line for line in out.splitlines() if line.strip()]
    # The echo of the question, then the tool line, the answer, the cited sources.
    assert TOOL_LINE.fullmatch(lines[1]), out
    assert lines[2].endswith("[1]")
    # The cited passage's place: its file, heading path and lines.
    assert re.fullmatch(r"Sources: \[1\] \S+\.md › .+, lines? \d+(–\d+)?", lines[3]), out
    assert leave(child) == 0
    # The answer was asked for as a stream, with the context window set explicitly.
    final = chat_requests(ollama)[-1]
    assert final["stream"] is True
    assert final["options"]["num_ctx"] == 8192 and final["options"]["num_predict"] == 2048


def test_sources_stores_new_and_model_commands(ollama, home, archivist, store):
    child = spawn_chat("--store", store, ollama_url=ollama.url, home=home)
    assert "No search results yet" in ask(child, "/sources")
    ask(child, REFUND_Q)
    sources = ask(child, "/sources")
    assert "* shop_docs (58 chunks): policies of an outdoor shop" in ask(child, "/stores")
    started = ask(child, "/new")
    assert re.search(r"Started a new conversation \(thread [0-9a-f]{12}\)", started)
    ask(child, "What does shipping cost?")
    assert "Hello" in ask(child, "hi")
    switched = ask(child, "/model gemma-notools:1b")
    assert "gemma-notools:1b cannot call tools: using retrieve-then-answer." in switched
    assert "gemma-notools:1b · retrieve-then-answer" in switched
    answered = ask(child, "Which carriers deliver parcels?")
    assert 'search_shop_docs("Which carriers deliver parcels?") · 5 results' in answered
    missing = ask(child, "/model nope:7b")
    assert "The model 'nope:7b' is not available" in missing and "ollama pull nope:7b" in missing
    assert "gemma-notools:1b · retrieve-then-answer" in ask(child, "/model")
    assert "Unknown command /frobnicate" in ask(child, "/frobnicate")
    assert leave(child) == 0

    # /sources printed the full text of every passage the search returned.
    flat = " ".join(sources.split())
    assert "score" not in flat.lower()  # the passages in order; a score is no help to read
    for result in archivist.search(REFUND_Q.rstrip("?"), store):
        title = f"[{result['rank']}] {place_text(result)}"
        assert title in sources, sources
        assert " ".join(result["text"].split()) in flat
    chats = chat_requests(ollama)
    # After /new the model no longer sees the first conversation.
    shipping = next(c for c in chats if c["messages"][-1]["content"] == "What does shipping cost?")
    assert not any(REFUND_Q in str(m.get("content")) for m in shipping["messages"])
    # ...but the same conversation goes on across the model switch, without tools.
    last = chats[-1]
    assert last["model"] == "gemma-notools:1b" and last["tools"] == []
    assert any(m.get("content") == "What does shipping cost?" for m in last["messages"])
    assert '<result n="1"' in last["messages"][-1]["content"]


def test_a_model_without_tools_answers_through_retrieve_then_answer(ollama, home, store):
    child = spawn_chat(
        "--store", store, "--model", "gemma-notools:1b", ollama_url=ollama.url, home=home
    )
    assert "retrieve-then-answer" in child.before
    out = ask(child, REFUND_Q)
    assert 'search_shop_docs("How many days do I have to ask for a refund?") · 5 results' in out
    assert re.search(r"\[1\]\nSources: \[1\] \S+\.md", out), out
    assert leave(child) == 0
    [request] = chat_requests(ollama)
    assert request["tools"] == [] and '<result n="1"' in request["messages"][-1]["content"]
