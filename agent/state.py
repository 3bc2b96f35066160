"""What the agent graphs hold between steps, and the input that starts a turn."""

from collections.abc import Sequence
from typing import Annotated, Any, NotRequired

from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.graph import MessagesState
from typing_extensions import TypedDict

from archivist.agent.records import ModelCall, ToolCall


def _per_turn(old: list | None, new: list | None) -> list:
    """Accumulate within a turn; a turn starts by sending None."""
    return [] if new is None else [*(old or []), *new]


class Ungraded(TypedDict):
    """A search waiting for the grade node."""

    record: ToolCall
    request: NotRequired[dict[str, Any]]
    """The model's tool call it answers (the agent only): its id, name and arguments."""
    content: NotRequired[str]
    """What the model would read without grading (the agent only: an error is sent as is)."""


class AgentState(MessagesState):
    steps: int
    """Model calls made in this turn."""
    calls: Annotated[list[ToolCall], _per_turn]
    """This turn's tool calls: name, arguments, numbered results, latency, error."""
    notes: Annotated[list[str], _per_turn]
    """This turn's notes to the user: what was left out to fit the context window."""
    ungraded: list[Ungraded]
    """With grading: this step's searches, waiting for the grade node."""
    grader_calls: Annotated[list[ModelCall], _per_turn]
    """This turn's grading, rewriting and condensing model calls: kind, tokens, milliseconds."""
    standalone: str
    """With history: this turn's question as a standalone search, once made ("" before)."""


def turn_reset() -> dict[str, Any]:
    """Return the update that clears the last turn's steps, calls, notes, grading and
    standalone question."""
    return {
        "steps": 0,
        "calls": None,
        "notes": None,
        "ungraded": [],
        "grader_calls": None,
        "standalone": "",
    }


def turn_input(question: str, history: Sequence[BaseMessage] = ()) -> dict[str, Any]:
    """Return the graph input that starts a new turn with `question`, after the earlier
    messages of `history` (a conversation its client keeps, sent whole with each question)."""
    return {"messages": [*history, HumanMessage(question)], **turn_reset()}
