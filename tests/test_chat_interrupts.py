"""`archivist chat` in a pseudo-terminal: Ctrl-C, Ctrl-D, and Ollama failing mid-chat."""

import json
import re

import pytest
from chat_terminal import TOOL_LINE, ask, chat_requests, leave, ready, spawn_chat
from conftest import cli

REFUND_Q = "How many days do I have to ask for a refund?"


def start_slow_answer(ollama, home, store, **terminal):
    """Start a chat and ask a question whose answer stops after its first sentence until the
    test opens the fake's gate; return once that sentence is shown.

    However slow the machine, the rest of the answer comes only when the test says so:
    whatever ends the answer early comes from the test, not from a race with the clock.
    """
    words = " ".join(f"word{i}" for i in range(60))
    ollama.script(
        "qwen2.5:3b",
        {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund"}}]},
        {"content": f"Refunds are simple. {words} [1]", "hold_after": 3},
    )
    child = spawn_chat("--store", store, ollama_url=ollama.url, home=home, **terminal)
    child.sendline(REFUND_Q)
    child.expect_exact("Refunds are simple.")
    return child


def test_ctrl_c_stops_a_slow_answer_and_returns_to_the_prompt(ollama, home, store):
    child = start_slow_answer(ollama, home, store)
    child.sendintr()
    child.expect_exact("(stopped)")
    assert "word0" not in child.before
    # The rest of the stopped answer is sent now: none of it may reach the screen.
    ollama.open_gate()
    ready(child)
    shown_after = child.before
    # The chat goes on, in the same conversation, and the stopped turn left no loose ends.
    out = ask(child, "hi")
    assert "Hello" in out
    assert not re.search(r"word\d", shown_after + out)
    assert leave(child) == 0
    greeting = chat_requests(ollama)[-1]["messages"]
    # The finished search is kept with its result; the stopped answer is not.
    assert [m["role"] for m in greeting[1:]] == ["user", "assistant", "tool", "user"]
    assert greeting[1]["content"] == REFUND_Q and "tool_calls" in greeting[2]


def test_the_log_of_a_stopped_turn_shows_its_search_what_was_streamed_and_the_stop(
    ollama, home, store
):
    child = start_slow_answer(ollama, home, store)
    child.sendintr()
    child.expect_exact("(stopped)")
    ollama.open_gate()
    ready(child)
    assert leave(child) == 0
    [turn] = json.loads(cli("logs", "--json", ollama=ollama, home=home).stdout)
    assert turn["error"] == "stopped by the user"
    [call] = turn["tool_calls"]
    assert call["name"] == "search_shop_docs" and call["args"] == {"query": "refund"}
    assert len(call["results"]) == 5 and all(r["chunk_id"] for r in call["results"])
    assert turn["answer"].startswith("Refunds are simple.") and "word59" not in turn["answer"]
    [line] = cli("logs", ollama=ollama, home=home).stdout.splitlines()
    assert re.search(r"  1 search  stopped after \d+ ms  How many days", line), line
    shown = cli("logs", "show", str(turn["id"]), ollama=ollama, home=home).stdout
    assert re.search(r'search_shop_docs\("refund"\) · 5 results · \d+ ms', shown), shown
    assert f"chunk {call['results'][0]['chunk_id']}" in shown
    assert "\nAnswer (cut short): Refunds are simple." in shown
    assert shown.rstrip().endswith("\nStopped by the user (Ctrl-C).") and "Error:" not in shown


@pytest.mark.parametrize("columns", [140, 400])
def test_ctrl_c_on_a_live_display_leaves_the_partial_answer_shown_once(
    ollama, home, store, columns
):
    # An xterm as wide as a person's: the answer streams in rich's live display, whose lines
    # are padded to the terminal's width. The terminal's own echo of Ctrl-C (`^C`) used to
    # wrap below the display, which then printed its top line twice.
    child = start_slow_answer(ollama, home, store, term="xterm", columns=columns)
    child.sendintr()
    child.expect_exact("(stopped)")
    ollama.open_gate()
    ready(child)
    shown = child.screen.lines()
    assert shown.count("Refunds are simple.") == 1, shown
    assert shown[shown.index("Refunds are simple.") + 1] == "(stopped)"
    assert not any("^C" in line for line in shown)
    assert leave(child) == 0


def test_ctrl_c_clears_the_prompt_and_ollama_failing_mid_chat_is_said_and_the_chat_goes_on(
    ollama, home, store
):
    # Retries 0.01 s apart, not a second: the waits are not what is checked here.
    child = spawn_chat("--store", store, ollama_url=ollama.url, home=home, backoff=0.01)
    # Ctrl-C at the prompt clears the line, asks nothing, and the prompt is back.
    child.send("half a question")
    child.sendintr()
    ready(child)
    assert chat_requests(ollama) == []
    # Refused on every try (4): the retries are announced, then the reason is printed.
    ollama.fail("/api/chat", 500, "llama runner process has terminated: signal: killed", 4)
    out = ask(child, REFUND_Q)
    # The question asked is the one typed after the Ctrl-C, nothing of the line before it.
    assert chat_requests(ollama)[0]["messages"][-1] == {"role": "user", "content": REFUND_Q}
    assert out.count("trying again") == 3
    assert "answered with an error: llama runner process has terminated" in out
    ollama.script("qwen2.5:3b", {"mid_stream_error": "an error was encountered while running"})
    out = ask(child, "hello")
    assert "an error was encountered while running" in out
    out = ask(child, REFUND_Q)
    assert TOOL_LINE.search(out) and "Sources: [1]" in out
    assert leave(child) == 0


def test_ollama_dying_mid_answer_prints_the_reason_and_the_chat_goes_on(ollama, home, store):
    child = start_slow_answer(ollama, home, store)
    ollama.stop()  # Ollama goes away mid-answer: the stream's connection is cut.
    ready(child)
    assert "word59" not in child.before
    assert "Cannot reach Ollama at" in child.before and "Traceback" not in child.before
    ollama.start()  # back on the same port: the chat, still running, answers again
    out = ask(child, REFUND_Q)
    assert TOOL_LINE.search(out) and "Sources: [1]" in out
    assert leave(child) == 0
