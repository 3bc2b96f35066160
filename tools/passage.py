"""Passage: one search result, the record a store's search returns and every caller passes on.

The retrieval tool, `archivist search --json`, `ask --json`, MCP and the LangChain retriever
all carry this record; it is a TypedDict, so at run time a plain dict (it goes through
LangGraph's checkpointers and JSON unchanged).
"""

from typing import Any, NotRequired

# pydantic reads these schemas (LangGraph Server) only from typing_extensions on Python 3.11.
from typing_extensions import TypedDict


class Passage(TypedDict):
    """One search result, as `search --json` prints it."""

    rank: int
    """Its place in its own search's results, from 1."""
    score: float
    """The score it was ranked by (the retrieval tool rounds it to 4 places)."""
    source: str
    chunk_id: str
    text: str
    metadata: dict[str, Any]
    rerank_score: NotRequired[float | None]
    """With reranking: the relevance model's probability that the passage is relevant."""
    retrieval_rank: NotRequired[int]
    """With reranking: its rank in the search before reranking."""
    n: NotRequired[int]
    """Its number within the turn, which `[n]` citations use (unique across the turn)."""
    page: NotRequired[int]
    """The PDF page or the slide it is on, where its format has them."""
    sheet: NotRequired[str]
    """The spreadsheet's sheet it comes from."""
    heading: NotRequired[str]
    """Its heading path, `Setup › Ports` (none when its text has no headings)."""
    lines: NotRequired[list[int]]
    """Its first and last line in its file (plain text and Markdown ingested with them)."""


class Place(TypedDict, total=False):
    """Where in its source a passage is: the fields a citation and a result carry."""

    page: int
    sheet: str
    heading: str
    lines: list[int]


def heading_path(metadata: dict[str, Any]) -> str:
    """Join a chunk's heading path for display: `Refund Policy › Refund window`."""
    return " › ".join(metadata.get("headings") or [])


def place(metadata: dict[str, Any]) -> Place:
    """Say where a chunk is in its source, from the metadata it was stored with: its page
    (a PDF page, else a slide), sheet, heading path and lines, each only where known."""
    found: Place = {}
    page = metadata.get("page", metadata.get("slide"))
    if isinstance(page, int):
        found["page"] = page
    if isinstance(metadata.get("sheet"), str):
        found["sheet"] = metadata["sheet"]
    if heading := heading_path(metadata):
        found["heading"] = heading
    lines = metadata.get("lines")
    if isinstance(lines, list) and len(lines) == 2 and all(isinstance(n, int) for n in lines):
        found["lines"] = list(lines)
    return found
