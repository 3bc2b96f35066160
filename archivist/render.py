"""One-line renderings of the records a turn leaves, shared by the chat and the turn log."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from archivist.agent.records import ToolCall
from archivist.printable import printable_name
from archivist.tools.words import count

if TYPE_CHECKING:  # the events are imported by what renders them: `search` renders none
    from archivist.tools.progress import Note, Retried

SLIDE_SUFFIXES = (".pptx", ".ppt", ".odp")
"""Sources whose `page` is a slide."""


def place_text(record: Mapping[str, Any]) -> str:
    """Say where a cited passage or a result is: `manual.pdf p. 4`, `deck.pptx slide 2`,
    `guide.md › Setup › Ports, lines 12–18` (just the source where nothing more is known)."""
    source = str(record["source"])
    text = printable_name(source)
    if "page" in record:
        slide = source.lower().endswith(SLIDE_SUFFIXES)
        text += f" {'slide' if slide else 'p.'} {record['page']}"
    for part in (record.get("sheet"), record.get("heading")):
        if part:
            text += f" › {printable_name(part)}"
    if lines := record.get("lines"):
        first, last = lines
        text += f", line {first}" if first == last else f", lines {first}–{last}"
    return text


def relevance_text(result: Mapping[str, Any]) -> str:
    """` (relevance 0.91)` for a reranked result: the reranking model's probability that it
    is relevant; '' otherwise. A search's own `score` is not shown to people: it only orders
    the results, on a scale that differs with the search mode (`--json` keeps it)."""
    if "rerank_score" not in result:
        return ""
    score = result["rerank_score"]  # None: the model's answer for it was unreadable
    return " (relevance " + ("unreadable" if score is None else f"{score:.2f}") + ")"


def retry_notice(event: Retried) -> str:
    """Say that a refused request is tried again, as the ingest bar, `ask` and the chat do."""
    if event.request == "chat":
        of = f" of {event.limit}" if event.limit else ""
        return f"{event.error}; trying again in {event.wait:g} s (retry {event.attempt}{of})."
    return (
        f"  embedding request failed ({event.error}); retry {event.attempt} in {event.wait:.1f} s"
    )


def notice_text(event: Note | Retried) -> str:
    """The words of a notice a turn gives: a note as written, a retry said as above."""
    from archivist.tools.progress import Note

    return event.text if isinstance(event, Note) else retry_notice(event).strip()


def _arguments(args: dict) -> str:
    return ", ".join(f'{k}="{printable_name(str(v))}"' for k, v in args.items() if v is not None)


def tool_line(call: ToolCall) -> str:
    """Describe one tool call: `search_x("query") · 5 results · 2 relevant · 14 ms`.

    A search limited to a source says which: `search_x("query", source="form")`. A graded
    search says how many passages were relevant (or that grading failed); a search the grader
    rewrote is announced on a line of its own: `↻ rewrote to "query"`. A reranked search says
    how much of its time the reranking took: `· 830 ms (reranking 812 ms)`.
    """
    query = printable_name(str(call["args"].get("query", "")))
    found = f"error: {call['error']}" if "error" in call else count(len(call["results"]), "result")
    if "grading_error" in call:
        found += " · grading failed, all kept"
    elif "kept" in call and "query" in call["args"]:
        found += f" · {len(call['kept'])} relevant"
    # A list or read has no query: its arguments are shown (`read_x(source="a.md")`).
    shown = f'"{query}"' if "query" in call["args"] else _arguments(call["args"])
    if "query" in call["args"] and call["args"].get("source"):
        shown += f', source="{printable_name(str(call["args"]["source"]))}"'
    line = f"{call['name']}({shown}) · {found} · {call['latency_ms']:.0f} ms"
    if "rerank_ms" in call:
        line += f" (reranking {call['rerank_ms']:.0f} ms)"
    if "grade_ms" in call:
        line += f" + {call['grade_ms']:.0f} ms grading"
    if "rewritten_from" in call:
        line = f'↻ rewrote to "{query}"\n{line}'
    return line
