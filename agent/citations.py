"""Citations: find `[n]` markers in an answer and check them against what was retrieved."""

import re
from collections.abc import Iterable

from archivist.agent.records import Citation, ToolCall

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def cited_numbers(answer: str) -> list[int]:
    """Return the passage numbers an answer cites, in first-cited order."""
    seen: dict[int, None] = {}
    for group in _MARKER.findall(answer):
        for number in group.split(","):
            seen.setdefault(int(number), None)
    return list(seen)


def check_citations(answer: str, calls: Iterable[ToolCall]) -> tuple[list[Citation], list[int]]:
    """Return (valid citations with their sources, numbers cited that nothing retrieved)."""
    retrieved = {r["n"]: r for call in calls for r in call["results"]}
    valid: list[Citation] = []
    invalid: list[int] = []
    for n in cited_numbers(answer):
        if n in retrieved:
            valid.append(
                {"n": n, "source": retrieved[n]["source"], "chunk_id": retrieved[n]["chunk_id"]}
            )
        else:
            invalid.append(n)
    return valid, invalid
