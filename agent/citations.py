"""Citations: find `[n]` markers in an answer, check them against what was retrieved, say
where each cited passage is, and find the sentences of a passage the answer used."""

import re
from collections.abc import Iterable

from archivist.agent.records import Citation, Passage, ShownPassage, ToolCall
from archivist.tools.passage import place
from archivist.tools.sparse import tokenize

_MARKER = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")
_LEADING_MARKERS = re.compile(r"^\s*((?:\[\d+(?:\s*,\s*\d+)*\]\s*)+)(.*)$", re.DOTALL)
# Where a sentence ends: after . ! ? and a space, after CJK end punctuation, at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[。！？；])|\n+")
# A passage sentence counts as used when at least this share of its terms is in the answer's
# sentences citing it (and at least two terms, or all of a shorter one's).
USED_SHARE = 0.5


def cited_numbers(answer: str) -> list[int]:
    """Return the passage numbers an answer cites, in first-cited order."""
    seen: dict[int, None] = {}
    for group in _MARKER.findall(answer):
        for number in group.split(","):
            seen.setdefault(int(number), None)
    return list(seen)


def check_citations(answer: str, calls: Iterable[ToolCall]) -> tuple[list[Citation], list[int]]:
    """Return (valid citations with their sources and places, numbers cited that nothing
    retrieved). A place is the passage's page or slide, heading path and lines, where known."""
    retrieved = {r["n"]: r for call in calls for r in call["results"]}
    valid: list[Citation] = []
    invalid: list[int] = []
    for n in cited_numbers(answer):
        if n in retrieved:
            found = retrieved[n]
            valid.append(
                {
                    "n": n,
                    "source": found["source"],
                    "chunk_id": found["chunk_id"],
                    **place(found.get("metadata") or {}),
                }
            )
        else:
            invalid.append(n)
    return valid, invalid


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """The (start, end) offsets of a text's sentences, without surrounding spaces."""
    spans, start = [], 0
    for match in [*_SENTENCE_END.finditer(text), None]:
        end = match.start() if match else len(text)
        piece = text[start:end]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            spans.append((start + lead, start + len(piece.rstrip())))
        if match:
            start = match.end()
    return spans


def supporting(answer: str, n: int) -> str:
    """The sentences of an answer that cite `[n]` (a marker after a sentence's full stop
    belongs to that sentence); the whole answer when none does."""
    sentences: list[str] = []
    for start, end in sentence_spans(answer):
        piece = answer[start:end]
        markers = _LEADING_MARKERS.match(piece)
        if markers and sentences:
            sentences[-1] += " " + markers.group(1)
            piece = markers.group(2)
        if piece.strip():
            sentences.append(piece)
    citing = [s for s in sentences if n in cited_numbers(s)]
    return " ".join(citing) if citing else answer


def used_sentences(text: str, answer: str, n: int) -> list[tuple[int, int]]:
    """The spans of a passage's sentences that the answer's sentences citing `[n]` used, by
    lexical overlap: most of a sentence's terms (the store's BM25 terms) appear in them."""
    said = set(tokenize(_MARKER.sub(" ", supporting(answer, n))))
    used = []
    for start, end in sentence_spans(text):
        terms = set(tokenize(text[start:end]))
        shared = len(terms & said)
        if terms and shared >= min(2, len(terms)) and shared >= USED_SHARE * len(terms):
            used.append((start, end))
    return used


def shown_passages(
    results: Iterable[Passage], answer: str, cited: Iterable[int]
) -> list[ShownPassage]:
    """The passages of a turn as /sources shows them: each cited one with the sentences the
    answer used."""
    numbers = set(cited)
    return [
        {
            **r,
            "cited": r.get("n") in numbers,
            "used": used_sentences(r["text"], answer, r["n"]) if r.get("n") in numbers else [],
        }
        for r in results
    ]
