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


class SearchCall(TypedDict):
    """The search step: the tool a turn called (the model, the application or the grader's
    rewrite), with what, and what came back."""

    name: str
    args: dict[str, Any]
    results: list[Passage]
    error: NotRequired[str]
    """Why the call failed (bad arguments, an unknown tool); then `results` is empty."""
    latency_ms: NotRequired[float]
    """The search's wall time, reranking included."""
    from_text: NotRequired[bool]
    """True when the model wrote the call as text and Archivist recovered it."""


# The later steps' records are `total=False` so that a search's record (`ToolCall`), which
# merges in those of the steps that ran on it, requires none of their fields.


class Reranking(TypedDict, total=False):
    """The reranking step of a search whose request named a rerank model (both fields)."""

    rerank_ms: float
    """The part of the search's `latency_ms` spent scoring the candidates."""
    rerank_model: str
    """The model that scored them."""


class Grading(TypedDict, total=False):
    """The grading step: the grader's verdicts on a search's passages (`grades` and `kept`
    always)."""

    grades: list[Grade]
    """The verdicts the grader gave (a passage without one is kept)."""
    kept: list[int]
    """The numbers of the passages judged relevant."""
    grade_ms: float
    grading_error: str
    """Why the grader's reply could not be read (every passage was then kept)."""


class Showing(TypedDict, total=False):
    """The step that gave a graded search's passages to the model to answer from."""

    shown: list[int]
    """The numbers of the passages the model was given."""


class Rewriting(TypedDict, total=False):
    """The rewrite step, on the search it made or on the missed search it could not follow."""

    rewritten_from: str
    """For a search the grader rewrote: the query it replaced."""
    rewrite_error: str
    """Why no rewrite followed this missed search."""


class Condensing(TypedDict, total=False):
    """The condense step of a follow-up's search."""

    condensed_from: str
    """The words the search was asked with (the user's, copied), before the conversation's
    subject was added (archivist.agent.followup)."""


class ToolCall(SearchCall, Reranking, Grading, Showing, Rewriting, Condensing):
    """One search a turn made, as `ask --json` and the turn log show it: the search step's
    record, with the records of the steps that ran on it merged in (reranking, grading,
    showing, rewriting, condensing). A step that did not run adds nothing: only the search
    step's `name`, `args` and `results` are always there."""


Step = Reranking | Grading | Showing | Rewriting | Condensing
"""The record of a step that ran on a search after it."""


def with_step(call: ToolCall, step: Step) -> ToolCall:
    """A search's record with a later step's record merged in: a new record, the given one
    left as it is (it may already sit in the graph's state)."""
    return {**call, **step}  # type: ignore[typeddict-item] - the step's keys are ToolCall's


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
