"""The `search_<store>` tool as LangChain runs it (imported where a tool is built: LangChain
and pydantic cost a command ~0.3 s to import).

What the model sees is its name, its description and `SearchArgs`; what a program may also
give, per call, rides in the call's config (`search_config`): options of the search that a
model is not offered (the retriever's `invoke(query, k=1)`), and the number the call's
passages start from (a turn numbers all its searches' passages in one sequence).
"""

from collections.abc import Callable
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, ToolException

from archivist.agent.retrieval import SearchResult, UnknownSource, format_results
from archivist.agent.search_args import SearchArgs
from archivist.tools.search import SearchRequest

OPTIONS = "search_options"
"""The config's `configurable` key holding a call's changes to the search options."""
FIRST = "first_passage"
"""The config's `configurable` key holding the number of the call's first passage."""


def search_config(first: int | None = None, **options: Any) -> RunnableConfig:
    """The config of one search call: its passages numbered from `first`, its options
    changed by `options` (`SearchRequest` fields; an unknown one is refused when it runs)."""
    configurable: dict[str, Any] = {OPTIONS: options}
    if first is not None:
        configurable[FIRST] = first
    return {"configurable": configurable}


def search_tool(
    name: str,
    description: str,
    search: Callable[[str, SearchRequest], SearchResult],
    request: SearchRequest,
) -> StructuredTool:
    """A tool running `search(query, request)`: its text is the passages numbered for the
    model, rendered once here; its artifact the `SearchResult`."""

    def run(
        query: str, source: str | None = None, *, config: RunnableConfig
    ) -> tuple[str, SearchResult]:
        configurable = config.get("configurable") or {}
        asked = request.with_options(**configurable.get(OPTIONS, {})).with_options(source=source)
        try:
            result = search(query, asked)
        except UnknownSource as exc:
            raise ToolException(str(exc)) from None
        first = configurable.get(FIRST, 1)
        return format_results(name, query, result, first, asked.source), result

    return StructuredTool.from_function(
        func=run,
        name=name,
        description=description,
        args_schema=SearchArgs,
        response_format="content_and_artifact",
    )
