"""The chat loop as a function: scripted input, a scripted conversation, the exact transcript."""

import io

import pytest

from archivist.terminal.chat import PlainView, chat_loop
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import Searched, Token

CALL = {
    "name": "search_docs",
    "args": {"query": "refund days"},
    "results": [{"n": 1, "rank": 1, "score": 0.74, "source": "refund.md", "text": "30 days."}],
    "latency_ms": 14.2,
}


def result(answer: str, calls=(), citations=()) -> dict:
    return {
        "answer": answer,
        "tool_calls": list(calls),
        "citations": list(citations),
        "invalid_citations": [],
    }


class ScriptedConversation:
    """Answers from a list: a result streams its answer in words; an exception is raised."""

    def __init__(self, *replies) -> None:
        self.replies = list(replies)
        self.asked: list[str] = []
        self.threads = 0
        self.model = "m1"

    def answer(self, question, on_event):
        self.asked.append(question)
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            on_event(Token("Partial "))
            raise reply
        for call in reply["tool_calls"]:
            on_event(Searched(call))
        for word in reply["answer"].split(" "):
            on_event(Token(word + " "))
        reply["answer"] = reply["answer"] + " "
        return reply

    def new(self):
        self.threads += 1
        return f"t{self.threads}"

    def switch_model(self, name):
        if name == "missing":
            raise ArchivistError("The model 'missing' is not available.", "Pull it.")
        self.model = name
        return [f"{name} cannot call tools: using retrieve-then-answer."]

    def describe(self):
        return f"{self.model} · agent"

    def stores(self):
        return [{"store": "docs", "chunks": 3, "description": "the docs", "in_use": True}]

    def sources(self):
        return [{**r, "cited": False, "used": []} for r in CALL["results"]]


def run(conversation, *lines: str) -> tuple[int, str, str]:
    script = iter(lines)

    def read(prompt: str) -> str:
        line = next(script, None)
        if line is None:
            raise EOFError
        if line == "^C":
            raise KeyboardInterrupt
        return line

    out, err = io.StringIO(), io.StringIO()
    status = chat_loop(conversation, read, PlainView(out, err))
    return status, out.getvalue(), err.getvalue()


def test_a_turn_prints_tool_lines_the_streamed_answer_and_sources():
    conversation = ScriptedConversation(
        result("Thirty days [1]", [CALL], [{"n": 1, "source": "refund.md"}])
    )
    status, out, _ = run(conversation, "How long?")
    assert status == 0
    assert out == (
        'search_docs("refund days") · 1 result · 14 ms\nThirty days [1] \nSources: [1] refund.md\n'
    )


def test_commands_run_without_asking_the_model():
    conversation = ScriptedConversation()
    status, out, err = run(
        conversation, "/help", "/sources", "/stores", "/model", "/model small", "/model missing",
        "/new", "/nope", "/exit", "never read",
    )  # fmt: skip
    assert status == 0 and conversation.asked == []
    assert "/sources" in out and "/model [NAME]" in out
    # The passages in their order, without the search's score (a number on no fixed scale).
    assert "\n[1] refund.md\n30 days.\n" in out and "score" not in out.lower()
    assert "* docs (3 chunks): the docs" in out
    assert "m1 · agent\n" in out
    assert "small cannot call tools: using retrieve-then-answer.\n" in err
    assert "small cannot call tools" not in out and "m1 · agent\nsmall · agent\n" in out
    assert "Started a new conversation (thread t1)." in out
    assert "Error: The model 'missing' is not available.\nPull it." in err
    assert "Unknown command /nope" in err


def test_ctrl_c_stops_an_answer_and_failures_keep_the_chat_going():
    conversation = ScriptedConversation(
        KeyboardInterrupt(),
        ArchivistError("Cannot reach Ollama.", "Start it."),
        RuntimeError("boom"),
        result("Back again"),
    )
    status, out, err = run(conversation, "one", "^C", "two", "three", "four")
    assert status == 0 and conversation.asked == ["one", "two", "three", "four"]
    assert out.startswith("Partial \n(stopped)\nPartial \nPartial \nBack again")
    assert "Error: Cannot reach Ollama.\nStart it." in err
    assert "Error: RuntimeError: boom" in err


def test_pasted_lines_starting_with_a_slash_are_a_question():
    conversation = ScriptedConversation(result("Paths."))
    run(conversation, "/etc/hosts\n/etc/passwd\nwhat are these?")
    assert conversation.asked == ["/etc/hosts\n/etc/passwd\nwhat are these?"]


def test_a_conversation_still_being_built_answers_commands_and_waits_for_questions():
    import threading

    from archivist.terminal.starting import Starting

    go = threading.Event()
    out = io.StringIO()

    def build(say):
        say("building…")
        go.wait()  # until the question is read
        return ScriptedConversation(result("Thirty days.")), ["m1 · agent · ready"]

    starting = Starting(build, lambda line: out.write(line + "\n"))
    starting.start()
    script = iter(["/help", "How long?"])

    def read(prompt: str) -> str:
        line = next(script, None)
        if line is None:
            raise EOFError
        if line == "How long?":
            go.set()
        return line

    assert chat_loop(starting, read, PlainView(out, io.StringIO())) == 0
    shown = out.getvalue()
    # Help needs no agent; the question waits for it, and what the build said comes first.
    assert shown.index("/help ") < shown.index("m1 · agent · ready") < shown.index("Thirty days.")
    assert shown.index("building…") < shown.index("m1 · agent · ready")


def test_a_conversation_that_cannot_be_built_ends_the_chat_with_its_error():
    from archivist.terminal.chat import StartFailed
    from archivist.terminal.starting import Starting

    missing = ArchivistError("There is no store named 'nope'.", "Create it.")

    def build(say):
        raise missing

    starting = Starting(build, lambda line: None)
    starting.start()
    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(StartFailed) as failed:
        chat_loop(starting, lambda prompt: "How long?", PlainView(out, err))
    assert failed.value.error is missing
    assert out.getvalue() == err.getvalue() == ""  # the chat does not show it: its caller does
