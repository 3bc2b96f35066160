"""A store in any LangChain or LangGraph program: as a retriever, or as the agent's own tool.

The tool is `make_retrieval_tool`'s `search_<store>` (numbered passages for a model to cite);
the retriever returns the same search's results as LangChain `Document`s, for chains and for
`create_retriever_tool`. `Archivist.retriever(store)` and `Archivist.tool(store)` build both
from the settings.
"""

from typing import Any

from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import BaseTool
from pydantic import ConfigDict

from archivist.agent.search_tool import search_config
from archivist.tools.passage import Passage, place
from archivist.tools.search import SearchMode

RERANK_FIELDS = ("rerank_score", "retrieval_rank")


class StoreRetriever(BaseRetriever):
    """A store's search as a LangChain retriever: one Document per passage, best first.

    Each Document's metadata holds the passage's `source`, `score`, `rank` and `chunk_id`
    (also its id) and where it is — `page`, `sheet`, `heading`, `lines`, where known — with
    the metadata the passage was stored with, and, reranked, `rerank_score` and
    `retrieval_rank`.

    The fields set the search's options for every call (None: the tool's own); a call may
    change any option of a search (`SearchRequest`'s fields) for itself:
    `retriever.invoke(query, k=1, source="policies/")`. An unknown field or option is refused.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    tool: BaseTool
    """The store's retrieval tool (`make_retrieval_tool`): the search, its settings and checks."""
    k: int | None = None
    """How many passages to return."""
    mode: SearchMode | None = None
    """`hybrid`, `dense` or `sparse`."""
    source: str | None = None
    """Search only this document, folder or name prefix, as the tool's `source` does."""
    min_score: float | None = None
    """Drop passages scoring below this (in the mode's own score)."""
    mmr: float | None = None
    """Re-rank for diversity: 1 = relevance only, 0 = diversity only."""

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun, **options: Any
    ) -> list[Document]:
        fields = ("k", "mode", "source", "min_score", "mmr")
        chosen = {name: getattr(self, name) for name in fields} | options
        config = search_config(**chosen)
        call = {"name": self.tool.name, "args": {"query": query}, "id": "retriever"}
        call["type"] = "tool_call"
        message = self.tool.invoke(call, {**config, "callbacks": run_manager.get_child()})
        return [as_document(result) for result in message.artifact]


def as_document(result: Passage) -> Document:
    """Turn one search result (as `archivist search --json` prints it) into a Document."""
    return Document(
        id=result["chunk_id"],
        page_content=result["text"],
        metadata={
            **result["metadata"],
            **place(result["metadata"]),
            "source": result["source"],
            "score": result["score"],
            "rank": result["rank"],
            "chunk_id": result["chunk_id"],
            **{key: result[key] for key in RERANK_FIELDS if key in result},
        },
    )
