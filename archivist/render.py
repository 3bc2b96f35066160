"""One-line renderings of the records a turn leaves, shared by the chat and the turn log."""

from archivist.agent.records import ToolCall
from archivist.printable import printable_name
from archivist.tools.progress import Note, Retried
from archivist.words import count


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
    return event.text if isinstance(event, Note) else retry_notice(event).strip()


def tool_line(call: ToolCall) -> str:
    """Describe one tool call: `search_x("query") · 5 results · 2 relevant · 14 ms`.

    A graded search says how many passages were relevant (or that grading failed); a search
    the grader rewrote is announced on a line of its own: `↻ rewrote to "query"`. A reranked
    search says how much of its time the reranking took: `· 830 ms (reranking 812 ms)`.
    """
    query = printable_name(str(call["args"].get("query", "")))
    found = f"error: {call['error']}" if "error" in call else count(len(call["results"]), "result")
    if "grading_error" in call:
        found += " · grading failed, all kept"
    elif "kept" in call:
        found += f" · {len(call['kept'])} relevant"
    line = f'{call["name"]}("{query}") · {found} · {call["latency_ms"]:.0f} ms'
    if "rerank_ms" in call:
        line += f" (reranking {call['rerank_ms']:.0f} ms)"
    if "grade_ms" in call:
        line += f" + {call['grade_ms']:.0f} ms grading"
    if "rewritten_from" in call:
        line = f'↻ rewrote to "{query}"\n{line}'
    return line
