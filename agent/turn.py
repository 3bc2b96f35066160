"""One turn of an agent: run it, and describe it as `ask --json` does."""

import time
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage

from archivist.agent.citations import check_citations
from archivist.agent.context import turn_start
from archivist.agent.grading import STRUCTURED_TAG
from archivist.agent.records import ModelCall, Turn, Usage
from archivist.agent.setup import AGENT, AgentSetup
from archivist.agent.state import turn_input
from archivist.agent.textcalls import StreamFilter, turn_text_calls
from archivist.tools.passage import heading_path
from archivist.tools.progress import CHANNEL, ProgressFn, Thinking, Token


class _Relay(BaseCallbackHandler):
    """Pass a running turn's progress to a chat view: tokens, reasoning, tool calls, notes.

    Each model call's text goes through a StreamFilter, so a tool call the model writes as
    text is never shown, and `<think>` text in the answer is shown as thinking.
    """

    raise_error = True

    def __init__(self, on_event: ProgressFn) -> None:
        self.on_event = on_event
        self.filters: dict[Any, StreamFilter] = {}

    def on_llm_new_token(self, token: str, *, chunk=None, **kwargs: Any) -> None:
        if STRUCTURED_TAG in (kwargs.get("tags") or ()):
            return  # the grader's JSON is not the answer
        message = getattr(chunk, "message", None)
        reasoning = message.additional_kwargs.get("reasoning_content") if message else None
        if reasoning:
            self.on_event(Thinking(reasoning))
        if token:
            stream = self.filters.setdefault(kwargs.get("run_id"), StreamFilter())
            self._relay(stream.feed(token))

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        stream = self.filters.pop(kwargs.get("run_id"), None)
        if stream:
            self._relay(stream.end())

    def _relay(self, pieces: Sequence[tuple[str, str]]) -> None:
        for kind, text in pieces:
            self.on_event(Thinking(text) if kind == "thinking" else Token(text))

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == CHANNEL:  # a step's Searched or Note, the Ollama seam's Retried
            self.on_event(data)


def run_turn(
    setup: AgentSetup,
    question: str,
    thread_id: str | None = None,
    on_event: ProgressFn | None = None,
    history: Sequence[BaseMessage] = (),
) -> Turn:
    """Run one turn of an agent and describe it as `ask --json` does.

    `on_event` hears the turn as it runs (events from `archivist.tools.progress`): `Token` and
    `Thinking` text as the model streams it, `Searched` with each finished tool call's record,
    `Note` when the context guard left something out or a call written as text could not be
    run, `Retried` when a model request Ollama refused is tried again. A model able to search
    that answered without searching gets `searched: false` and a note saying so. `history`:
    the conversation before the question, for a caller that keeps it (a graph without a
    checkpointer); a checkpointed thread keeps its own.
    """
    started = time.perf_counter()
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id or str(uuid.uuid4())},
        "recursion_limit": 100,
    }
    if on_event is not None:
        config["callbacks"] = [_Relay(on_event)]
    state = setup.graph.invoke(turn_input(question, history), config)
    messages = state["messages"]
    answer = messages[-1].content
    citations, invalid = check_citations(answer, state["calls"])
    searched = bool(state["calls"]) or setup.mode != AGENT
    notes = list(dict.fromkeys(state.get("notes") or []))
    if not searched:
        notes.append(unsearched_note(setup.model, setup.stores))
    return {
        "question": question,
        "answer": answer,
        "model": setup.model,
        "stores": list(setup.stores),
        "mode": setup.mode,
        "grade": setup.grade,
        "tool_calls": state["calls"],
        "searched": searched,
        "text_calls": turn_text_calls(messages),
        "citations": citations,
        "invalid_citations": invalid,
        "notes": notes,
        "latency_ms": round((time.perf_counter() - started) * 1000),
        "usage": turn_usage(messages, state.get("grader_calls") or []),
    }


def unsearched_note(model: str, stores: Sequence[str]) -> str:
    """Say that a model able to search answered without searching, and how to make it."""
    return (
        f"{model} answered without searching {', '.join(stores)}. If it should have, "
        "--retrieve-first (or ARCHIVIST_RETRIEVE_FIRST=1) searches before every answer."
    )


def turn_usage(messages: Sequence[BaseMessage], grader_calls: Sequence[ModelCall] = ()) -> Usage:
    """Add up the token counts Ollama reported for the model calls of the current turn.

    `grader_calls` (grading, rewriting, condensing a follow-up) leave no message behind; they
    count in the totals and are also counted apart.
    """
    replies = [m for m in messages[turn_start(messages) :] if isinstance(m, AIMessage)]
    counted = [m.usage_metadata for m in replies if m.usage_metadata]
    return {
        "model_calls": len(replies) + len(grader_calls),
        "input_tokens": sum(u.get("input_tokens", 0) for u in [*counted, *grader_calls]),
        "output_tokens": sum(u.get("output_tokens", 0) for u in [*counted, *grader_calls]),
        "grade_calls": sum(1 for a in grader_calls if a["kind"] == "grade"),
        "rewrite_calls": sum(1 for a in grader_calls if a["kind"] == "rewrite"),
        "condense_calls": sum(1 for a in grader_calls if a["kind"] == "condense"),
    }


def turn_passages(turn: Turn) -> list[dict[str, Any]]:
    """Flatten a turn's trajectory for a table: one record per passage each tool call
    returned (a call that failed or found nothing: one record with its error), in call order,
    with the call's number, tool and arguments, and whether the answer cited the passage."""
    cited = {citation["n"] for citation in turn["citations"]}
    records = []
    for number, call in enumerate(turn["tool_calls"], start=1):
        made = {"call": number, "tool": call["name"], "args": call["args"]}
        if not call["results"]:
            records.append({**made, "error": call.get("error")})
        for result in call["results"]:
            records.append(
                {
                    **made,
                    "n": result.get("n"),
                    "rank": result["rank"],
                    "score": result["score"],
                    "source": result["source"],
                    "heading": heading_path(result["metadata"]),
                    "cited": result.get("n") in cited,
                    "text": result["text"],
                }
            )
    return records
