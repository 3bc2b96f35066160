"""Corpus-level cases: questions whose answer is a set of sources, a count, a document's
summary or what surrounds a passage, and how a turn is scored on them.

A case states one or more of these beside the usual keys (each is checked as it is read):

* `expect_source_set`: the sources a complete answer names; scored by the precision and
  recall of the sources the turn cited or listed (a `list_` call's results count as listed);
* `expect_count`: the number the answer must give, exactly (as digits, a word is not read);
* `expect_read`: the source to summarize: the turn must have read it (a `read_` call showing
  it) and the answer must cite it;
* `expect_read_around`: the source a passage of which the question asks to read around: the
  turn must have read it with `around`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from archivist.tools.errors import ArchivistError

KEYS = ("expect_source_set", "expect_count", "expect_read", "expect_read_around")
CORPUS_METRICS = (
    "source_set_precision",
    "source_set_recall",
    "count_exact_rate",
    "document_read_rate",
    "read_around_rate",
)
_NUMBER = re.compile(r"(?<![\d.,])\d[\d,]*(?![\d,]*\.\d)")


def check_case(data: dict[str, Any], where: str) -> None:
    """Refuse a corpus-level expectation of the wrong shape, saying how to write it."""
    found = data.get("expect_source_set")
    if found is not None and (
        not isinstance(found, list) or not all(isinstance(s, str) and s for s in found)
    ):
        raise ArchivistError(
            f"{where}: `expect_source_set` must be a list of source names.",
            'Write it as "expect_source_set": ["refund.md", "returns.md"].',
        )
    count = data.get("expect_count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool)):
        raise ArchivistError(
            f"{where}: `expect_count` must be a whole number.", 'Write it as "expect_count": 4.'
        )
    for key in ("expect_read", "expect_read_around"):
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ArchivistError(
                f"{where}: `{key}` must be a source's name.", f'Write it as "{key}": "refund.md".'
            )


def _matches(source: str, expected: str) -> bool:
    return source == expected or source.endswith("/" + expected)


def _kind(call: dict[str, Any]) -> str:
    return str(call.get("name", "")).split("_", 1)[0]


def score(expect: dict[str, Any], turn: dict[str, Any] | None) -> dict[str, Any]:
    """The corpus-level outcomes of one turn (None where the case states no expectation)."""
    outcomes: dict[str, Any] = dict.fromkeys(
        ("source_set_precision", "source_set_recall", "count_exact", "document_read", "around")
    )
    calls = turn["tool_calls"] if turn else []
    if not any(expect.get(key) is not None for key in KEYS):
        return outcomes
    cited = [c.get("source", "") for c in turn.get("citations", [])] if turn else []
    if (wanted := expect.get("expect_source_set")) is not None:
        listed = [r["source"] for c in calls if _kind(c) == "list" for r in c["results"]]
        named = set(cited) | set(listed)
        right = {s for s in named if any(_matches(s, e) for e in wanted)}
        outcomes["source_set_precision"] = len(right) / len(named) if named else 0.0
        found = {e for e in wanted if any(_matches(s, e) for s in named)}
        outcomes["source_set_recall"] = len(found) / len(wanted) if wanted else 1.0
    if (count := expect.get("expect_count")) is not None:
        answer = turn["answer"] if turn else ""
        numbers = {int(n.replace(",", "")) for n in _NUMBER.findall(answer)}
        outcomes["count_exact"] = count in numbers
    if source := expect.get("expect_read"):
        read = _read(calls, source, around=False)
        outcomes["document_read"] = read and any(_matches(s, source) for s in cited)
    if source := expect.get("expect_read_around"):
        outcomes["around"] = _read(calls, source, around=True)
    return outcomes


def _read(calls: Sequence[dict[str, Any]], source: str, around: bool) -> bool:
    return any(
        _kind(c) == "read"
        and "error" not in c
        and (not around or "around" in c.get("args", {}))
        and any(_matches(r["source"], source) for r in c["results"])
        for c in calls
    )


def summarize(outcomes: Sequence[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, int]]:
    """The corpus-level metrics of a model's runs, and how many runs each counts."""
    metrics: dict[str, Any] = {}
    support: dict[str, int] = {}
    for metric, key in zip(
        CORPUS_METRICS,
        ("source_set_precision", "source_set_recall", "count_exact", "document_read", "around"),
        strict=True,
    ):
        values = [float(o[key]) for o in outcomes if o.get(key) is not None]
        metrics[metric] = sum(values) / len(values) if values else None
        support[metric] = len(values)
    return metrics, support
