"""The retrieval tool: one `search_<store>` tool per store, returning numbered passages."""

from html import escape
from typing import Any

from langchain_core.embeddings import Embeddings
from langchain_core.tools import BaseTool, StructuredTool
from pydantic import BaseModel, Field

from tools.store import KnowledgeStore, SearchMode

NO_RESULTS = "No matching passages were found."


class SearchArgs(BaseModel):
    """Arguments a model gives the retrieval tool."""

    query: str = Field(description="What to look for, in the words the documents would use.")


def tool_name(store_name: str) -> str:
    """Name the retrieval tool after its store."""
    return f"search_{store_name}"


def format_results(name: str, query: str, results: list[dict[str, Any]], start: int = 1) -> str:
    """Render results as a delimited block of numbered passages for the model.

    Passages are numbered from `start`, or by their own `n` when they carry one.

    Passage text and attributes are escaped, so a document cannot close the block or pose as
    the application's own markup: whatever it says reaches the model as quoted data.
    """
    lines = [f'<search_results tool="{escape(name)}" query="{escape(query)}">']
    for n, result in enumerate(results, start=start):
        n = result.get("n", n)  # a number the turn already gave it (passages may be reordered)
        lines.append(
            f'<result n="{n}" source="{escape(result["source"])}" score="{result["score"]:.3f}">'
        )
        lines.append(escape(result["text"], quote=False))
        lines.append("</result>")
    if not results:
        lines.append(NO_RESULTS)
    lines.append("</search_results>")
    return "\n".join(lines)


def make_retrieval_tool(
    store: KnowledgeStore,
    embeddings: Embeddings,
    k: int = 5,
    mode: SearchMode = "hybrid",
) -> BaseTool:
    """Build the `search_<store>` tool over a store; its artifact is the list of results."""
    name = tool_name(store.name)
    about = store.description or f"documents ingested into the '{store.name}' store"

    def search(query: str) -> tuple[str, list[dict[str, Any]]]:
        vector = None if mode == "sparse" else embeddings.embed_query(query)
        results = [r.to_dict() for r in store.search(vector, query, k=k, mode=mode)]
        return format_results(name, query, results), results

    return StructuredTool.from_function(
        func=search,
        name=name,
        description=(
            f"Search the knowledge base '{store.name}': {about}. Use it before answering any "
            "question about these documents. Returns numbered passages with their source; "
            "cite them as [n]."
        ),
        args_schema=SearchArgs,
        response_format="content_and_artifact",
    )
