"""The context guard: requests fit the window, history is trimmed whole, the user is told."""

import json

import pytest
from conftest import run_cli, write_files
from fake_ollama import ModelSpec
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from archivist.agent.context import (
    complete_tool_calls,
    estimate_tokens,
    fit_messages,
    shrink_results,
    tools_tokens,
    window_for,
)
from archivist.tools.errors import ArchivistError


def user_turns(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def request_tokens(request: dict) -> int:
    """Estimate a recorded /api/chat request the way the context guard does."""
    total = tools_tokens(request["tools"])
    for message in request["messages"]:
        total += 4 + estimate_tokens(message.get("content") or "")
        if message.get("tool_calls"):
            calls = [c["function"] for c in message["tool_calls"]]
            total += estimate_tokens(json.dumps(calls, ensure_ascii=False))
    return total


def test_the_context_guard_trims_a_long_history_and_says_so(archivist, ollama, home, tmp_path):
    ollama.add_model(ModelSpec("tiny-ctx:1b", ["completion", "tools"], context_length=1024))
    notes = {
        f"note{i}.md": f"# Note {i}\n\nParcel rule {i}: items ship in {i} days." for i in range(8)
    }
    archivist.ingest([str(write_files(tmp_path / "kb", notes))], "notes")
    archivist.close()
    questions = [f"What does parcel rule number {i} say about shipping days?" for i in range(5)]
    # The chat as a pipe feeds it (in this process): what it prints is the point, not the keys.
    done = run_cli(
        "chat",
        "--store",
        "notes",
        "--model",
        "tiny-ctx:1b",
        stdin="".join(q + "\n" for q in questions),
        ollama_url=ollama.url,
        home=home,
    )
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr

    assert "Note: To fit the 1024-token context window: left out" in printed
    chats = ollama.requests_to("/api/chat")
    assert {(c["options"]["num_ctx"], c["options"]["num_predict"]) for c in chats} == {(1024, 256)}
    # Every request fits the 768 tokens left after the answer's share, by our estimate...
    assert max(request_tokens(c) for c in chats) <= 768
    # ...and the last one lost the oldest turns whole but kept the current question.
    last = chats[-1]
    assert questions[0] not in user_turns(last) and user_turns(last)[-1] == questions[-1]
    roles = [m["role"] for m in last["messages"]]
    assert roles[1] == "user"  # trimmed history starts on a question, never on a tool result
    assert all(
        roles[i - 1] == "assistant" or roles[i - 1] == "tool"
        for i, role in enumerate(roles)
        if role == "tool"
    )


def results_block(first: int, count: int, words: int = 40) -> str:
    passages = "".join(
        f'\n<result n="{n}" source="doc{n}.md" score="0.5">\n{"lorem " * words}\n</result>'
        for n in range(first, first + count)
    )
    return f'<search_results tool="search_docs" query="q">{passages}\n</search_results>'


def turn(i: int, results: int = 5) -> list:
    call = {"name": "search_docs", "args": {"query": f"q{i}"}, "id": f"call{i}"}
    return [
        HumanMessage(f"question {i}"),
        AIMessage("", tool_calls=[call]),
        ToolMessage(results_block(1, results), tool_call_id=f"call{i}"),
        AIMessage(f"answer {i} [1]"),
    ]


def test_estimates_count_cjk_characters_as_tokens():
    assert estimate_tokens("abcd" * 10) == 10
    assert estimate_tokens("关税由谁承担") == 6
    assert estimate_tokens("") == 0


def test_the_window_is_the_models_context_capped_with_a_quarter_for_the_answer():
    assert window_for(32768, 8192).num_ctx == 8192
    assert window_for(2048, 8192).num_ctx == 2048
    assert window_for(None, 4096).num_ctx == 4096
    window = window_for(8192, 8192)
    assert (window.answer, window.prompt) == (2048, 6144)


def test_what_fits_is_left_alone():
    messages = turn(0)
    fitted = fit_messages(messages, 10_000, 8192)
    assert fitted.messages == messages and fitted.notes == []


def test_earlier_results_are_shortened_before_turns_are_dropped():
    messages = [*turn(0), HumanMessage("question 1")]
    full = fit_messages(messages, None, 0).messages
    limit = sum(estimate_tokens(str(m.content)) + 4 for m in full) - 50
    fitted = fit_messages(messages, limit, 2048)
    assert [type(m).__name__ for m in fitted.messages] == [
        "HumanMessage", "AIMessage", "ToolMessage", "AIMessage", "HumanMessage"
    ]  # fmt: skip
    assert fitted.messages[2].content.startswith("[5 passages from an earlier search")
    assert fitted.notes == [
        "To fit the 2048-token context window: shortened 1 earlier search result."
    ]


def test_old_turns_go_whole_so_a_tool_call_keeps_its_result():
    messages = [*turn(0), *turn(1), *turn(2), HumanMessage("question 3")]
    fitted = fit_messages(messages, 120, 1024)
    kinds = [type(m).__name__ for m in fitted.messages]
    assert kinds[0] == "HumanMessage" and fitted.messages[-1].content == "question 3"
    for i, message in enumerate(fitted.messages):
        if isinstance(message, ToolMessage):
            previous = fitted.messages[i - 1]
            assert isinstance(previous, AIMessage)
            assert previous.tool_calls[0]["id"] == message.tool_call_id
    assert "left out" in fitted.notes[0] and "earlier messages" in fitted.notes[0]
    assert sum(4 + estimate_tokens(str(m.content)) for m in fitted.messages) <= 120


def test_the_current_turn_loses_its_last_passages_when_it_alone_is_too_long():
    messages = turn(0, results=5)[:3]
    fitted = fit_messages(messages, 150, 1024)
    kept = fitted.messages[2].content
    assert '<result n="1"' in kept and '<result n="5"' not in kept
    assert kept.endswith("</search_results>")
    assert (
        "cut" in fitted.notes[0] and "passages from this turn's search results" in fitted.notes[0]
    )


def test_a_question_too_long_for_the_window_is_refused_with_the_fix():
    with pytest.raises(ArchivistError) as error:
        fit_messages([HumanMessage("word " * 2000)], 100, 1024)
    assert "does not fit the model's context window" in str(error.value)
    assert error.value.fix.startswith("Shorten it, or send a part at a time; --num-ctx")


def test_a_tool_call_without_its_result_is_not_sent():
    call = {"name": "search_docs", "args": {"query": "q"}, "id": "lost"}
    messages = [HumanMessage("q"), AIMessage("", tool_calls=[call]), HumanMessage("again")]
    assert [m.content for m in complete_tool_calls(messages)] == ["q", "again"]


def test_shrinking_removes_whole_passages_from_the_end():
    text = results_block(1, 3)
    shrunk, removed = shrink_results(text, estimate_tokens(text) - 5)
    assert removed == 1 and shrunk.count("<result ") == 2 and "doc3.md" not in shrunk
