"""The records that cross modules: passages, tool calls, model usage, turns.

`Passage` is storage's own (archivist.tools.passage): the store returns it, and a tool call
carries it on.

They are TypedDicts, so at run time they are plain dicts: they go through LangGraph's
checkpointers (the chat's SqliteSaver), the turn log and `ask --json` unchanged. A step that
adds to a record builds a new one (`{**call, "kept": [...]}`); none is changed in place, since
the same record may already sit in the graph's state or have been sent to the chat's view.
"""

from dataclasses import dataclass
from typing import Any, Literal, NotRequired

# pydantic reads these schemas (LangGraph Server) only from typing_extensions on Python 3.11.
from typing_extensions import TypedDict

from archivist.tools.passage import Passage


class Grade(TypedDict):
    """The grader's verdict on one passage."""

    n: int
    relevant: bool


class ToolCall(TypedDict):
    """One search a turn made: by the model, the application or the grader's rewrite."""

    name: str
    args: dict[str, Any]
    results: list[Passage]
    error: NotRequired[str]
    """Why the call failed (bad arguments, an unknown tool); then `results` is empty."""
    latency_ms: NotRequired[float]
    """The search's wall time, reranking included."""
    rerank_ms: NotRequired[float]
    """With reranking: the part of `latency_ms` spent scoring the candidates."""
    rerank_model: NotRequired[str]
    """With reranking: the model that scored them."""
    grades: NotRequired[list[Grade]]
    """With grading: the verdicts the grader gave (a passage without one is kept)."""
    kept: NotRequired[list[int]]
    """With grading: the numbers of the passages judged relevant."""
    shown: NotRequired[list[int]]
    """With grading: the numbers of the passages the model was given to answer from."""
    grade_ms: NotRequired[float]
    grading_error: NotRequired[str]
    """Why the grader's reply could not be read (every passage was then kept)."""
    rewritten_from: NotRequired[str]
    """For a search the grader rewrote: the query it replaced."""
    condensed_from: NotRequired[str]
    """For a follow-up's search: the words it was asked with (the user's, copied), before the
    conversation's subject was added (archivist.agent.followup)."""
    rewrite_error: NotRequired[str]
    """Why no rewrite followed this missed search."""
    from_text: NotRequired[bool]
    """True when the model wrote the call as text and Archivist recovered it."""


class WrittenCall(TypedDict):
    """A tool call the model wrote as text instead of calling the tool (agent.textcalls)."""

    name: str
    """The name as the model wrote it."""
    args: dict[str, Any]
    recovered: bool
    """Whether it was run (as a ToolCall marked `from_text`)."""
    tool: NotRequired[str]
    """The offered tool it ran as, when the written name differed (`search` for the only one)."""
    error: NotRequired[str]
    """Why it was not run: no offered tool by that name, or arguments that do not fit."""


class ModelCall(TypedDict):
    """One grading, rewriting or condensing request: it leaves no message behind, so it is
    counted here."""

    kind: Literal["grade", "rewrite", "condense"]
    input_tokens: int
    output_tokens: int
    ms: float
    error: NotRequired[str]


class Usage(TypedDict):
    """The model calls of one turn and the tokens Ollama reported for them."""

    model_calls: int
    input_tokens: int
    output_tokens: int
    grade_calls: int
    rewrite_calls: int
    condense_calls: int
    """Requests that turned a follow-up question into a standalone search."""


class Citation(TypedDict):
    """A passage the answer cites as `[n]`, and where it is in its source."""

    n: int
    source: str
    chunk_id: str
    page: NotRequired[int]
    """The PDF page or the slide."""
    sheet: NotRequired[str]
    heading: NotRequired[str]
    """The heading path, `Setup › Ports`."""
    lines: NotRequired[list[int]]
    """First and last line in the file (text, Markdown)."""


class ShownPassage(Passage):
    """A passage as the chat's /sources shows it: whether the answer cited it, and the spans
    of its text (start, end offsets) holding the sentences the answer used."""

    cited: bool
    used: list[tuple[int, int]]


class Turn(TypedDict):
    """One answered question: the object `ask --json` prints."""

    question: str
    answer: str
    model: str
    stores: list[str]
    mode: str
    """"agent" or "retrieve-then-answer"."""
    grade: bool
    tool_calls: list[ToolCall]
    searched: bool
    """False when a model able to search answered without searching (the agent only)."""
    text_calls: list[WrittenCall]
    """The tool calls the model wrote as text this turn, run or not, in order."""
    citations: list[Citation]
    invalid_citations: list[int]
    """Numbers the answer cites that no search returned."""
    notes: list[str]
    """What was left out to fit the context window, written calls that could not be run, and
    that the model did not search."""
    latency_ms: int
    usage: Usage


@dataclass(frozen=True)
class ModelInfo:
    """What Ollama's /api/show says about a model."""

    name: str
    capabilities: tuple[str, ...]
    context_length: int | None
    embedding_length: int | None

    @property
    def tools(self) -> bool:
        """Whether the model can call tools."""
        return "tools" in self.capabilities

    @property
    def thinking(self) -> bool:
        """Whether the model has a thinking mode."""
        return "thinking" in self.capabilities
