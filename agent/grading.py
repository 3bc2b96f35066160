"""Agentic retrieval: grade what a search returned, rewrite a search that missed, and assemble
the passages the model answers from.

The grader is the chat model itself, asked for structured output (Ollama's `format` JSON
schema). It sees all passages of one search in one request and returns a list of verdicts, so
grading costs one model call per search, not one per passage. A reply that is not valid JSON
or not the asked shape is no reason to fail the turn: the search is then left ungraded (every
passage kept) and the error recorded with it.
"""

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage
from pydantic import BaseModel, Field

from archivist.agent import prompts
from archivist.agent.context import estimate_tokens
from archivist.agent.records import Grading, ModelCall, Passage, SearchCall
from archivist.agent.retrieval import format_results

STRUCTURED_TAG = "archivist:structured"
"""Tag on the grader's model calls: their JSON is bookkeeping, not part of the answer."""
MAX_SUBQUERIES = 2


class Verdict(BaseModel):
    """The grader's verdict on one passage."""

    n: int = Field(description="The passage's number.")
    relevant: bool = Field(description="Whether the passage helps answer the question.")


class Grades(BaseModel):
    """The grader's verdicts on the passages of one search."""

    grades: list[Verdict]


class Rewrite(BaseModel):
    """Better searches for a question whose search found nothing relevant."""

    queries: list[str] = Field(
        min_length=1,
        max_length=MAX_SUBQUERIES,
        description="One search, or one for each fact when the question asks for two.",
    )


@dataclass
class Asked:
    """One structured request: the parsed reply (None when it failed) and its cost."""

    value: Any
    error: str | None
    usage: ModelCall
    text: str = ""
    """The reply's text as it came (for what a reply cut short still says)."""


def ask_structured(runnable, kind: str, system: str, request: str) -> Asked:
    """Send one structured request (system, request); return the parsed reply and its cost.

    A reply that cannot be read as the asked shape gives `value` None and the error, never an
    exception: the turn goes on without what was asked.
    """
    started = time.perf_counter()
    reply = runnable.invoke([SystemMessage(system), HumanMessage(request)])
    counts = reply["raw"].usage_metadata or {}
    error = reply["parsing_error"]
    usage: ModelCall = {
        "kind": kind,
        "input_tokens": counts.get("input_tokens", 0),
        "output_tokens": counts.get("output_tokens", 0),
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if error is not None:
        usage["error"] = _short(error)
    content = reply["raw"].content
    text = content if isinstance(content, str) else ""
    return Asked(None if error else reply["parsed"], usage.get("error"), usage, text)


_OBJECT = re.compile(r"\{[^{}]*\}")


def salvaged_verdicts(text: str) -> list[Verdict]:
    """The whole verdicts in a grading reply that is not valid JSON as a whole.

    Small models asked for JSON about an unclear question sometimes write a few verdicts and
    then only whitespace until the token limit, so the reply never closes; the verdicts they
    did write still count.
    """
    found = []
    for match in _OBJECT.finditer(text):
        try:
            found.append(Verdict.model_validate_json(match.group()))
        except ValueError:
            continue
    return found


class Grader:
    """Judge passages and propose searches with a chat model's structured output."""

    def __init__(self, model: BaseChatModel, max_rewrites: int = 2) -> None:
        self.max_rewrites = max_rewrites
        self._grades = model.with_structured_output(
            Grades, method="json_schema", include_raw=True
        ).with_config(tags=[STRUCTURED_TAG], run_name="grade_passages")
        self._rewrite = model.with_structured_output(
            Rewrite, method="json_schema", include_raw=True
        ).with_config(tags=[STRUCTURED_TAG], run_name="rewrite_query")

    def grade(self, question: str, call: SearchCall) -> tuple[Grading, list[ModelCall]]:
        """Grade a search's passages in one request; return the grading step's record (its
        `grades` and `kept`), and the model calls made (none for a search that found nothing).

        A passage the grader gives no verdict for is kept. A reply that is not valid JSON
        still counts for the whole verdicts it holds (salvaged_verdicts); with none, every
        passage is kept and `grading_error` says why.
        """
        results = call["results"]
        if not results:
            return {"grades": [], "kept": []}, []
        numbers = ", ".join(f"[{r['n']}]" for r in results)
        passages = format_results(call["name"], str(call["args"].get("query", "")), results)
        asked = ask_structured(
            self._grades,
            "grade",
            prompts.GRADE_SYSTEM,
            prompts.GRADE_REQUEST.format(question=question, passages=passages, numbers=numbers),
        )
        ours = {r["n"] for r in results}
        verdicts: dict[int, bool] = {}
        graded: Grading = {}
        given = asked.value.grades if asked.value is not None else salvaged_verdicts(asked.text)
        for verdict in given:
            if verdict.n in ours:
                verdicts.setdefault(verdict.n, verdict.relevant)
        if asked.value is None and not verdicts:
            graded["grading_error"] = asked.error or "no verdicts"
        graded["grades"] = [{"n": n, "relevant": v} for n, v in verdicts.items()]
        graded["kept"] = [r["n"] for r in results if verdicts.get(r["n"], True)]
        graded["grade_ms"] = asked.usage["ms"]
        return graded, [asked.usage]

    def rewrite(self, question: str, tried: Sequence[str]) -> tuple[list[str], ModelCall]:
        """Propose new searches (at most two) for a question; [] when none new came back."""
        asked = ask_structured(
            self._rewrite,
            "rewrite",
            prompts.REWRITE_SYSTEM,
            prompts.REWRITE_REQUEST.format(
                question=question, tried="; ".join(f'"{q}"' for q in tried)
            ),
        )
        seen = {" ".join(q.casefold().split()) for q in tried}
        queries: list[str] = []
        for query in asked.value.queries if asked.value else []:
            key = " ".join(query.casefold().split())
            if key and key not in seen:
                seen.add(key)
                queries.append(" ".join(query.split()))
        return queries[:MAX_SUBQUERIES], asked.usage


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= 300 else text[:299] + "…"


def edges_first(ranked: Sequence[Passage]) -> list[Passage]:
    """Put the most relevant passages first and last, the least relevant in the middle.

    Models attend best to the start and the end of a long context ("lost in the middle"):
    ranked 1..5 become 1, 3, 5, 4, 2.
    """
    return [*ranked[0::2], *ranked[1::2][::-1]]


@dataclass
class Assembled:
    """The passages chosen for the model, and what was left out."""

    passages: list[Passage]
    """In the order the model reads them, each keeping its turn-wide number `n`."""
    repeats: dict[int, int]
    """Passages found again this turn: their number -> the number they were shown under."""
    cut: int
    """Passages left out to stay within the budget (the least relevant ones)."""


def assemble(
    ranked: Sequence[Passage],
    shown: dict[str, int],
    budget: int | None,
    render=lambda passages: format_results("search", "", passages),
) -> Assembled:
    """Choose and order passages for the answer: no passage twice, within `budget` tokens.

    `ranked` is most relevant first. `shown` maps the chunk ids already shown this turn to their
    numbers; it is updated. Over budget, the least relevant passages go first.
    """
    fresh: list[Passage] = []
    repeats: dict[int, int] = {}
    mine: dict[str, int] = {}
    for result in ranked:
        earlier = shown.get(result["chunk_id"], mine.get(result["chunk_id"]))
        if earlier is not None:
            repeats[result["n"]] = earlier
            continue
        mine[result["chunk_id"]] = result["n"]
        fresh.append(result)
    cut = 0
    while fresh and budget is not None and estimate_tokens(render(fresh)) > budget:
        fresh.pop()
        cut += 1
    for result in fresh:
        shown[result["chunk_id"]] = result["n"]
    return Assembled(edges_first(fresh), repeats, cut)
