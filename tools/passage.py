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
    rerank_score: NotRequired[float]
    """With reranking: the relevance model's probability that the passage is relevant."""
    retrieval_rank: NotRequired[int]
    """With reranking: its rank in the search before reranking."""
    n: NotRequired[int]
    """Its number within the turn, which `[n]` citations use (unique across the turn)."""
