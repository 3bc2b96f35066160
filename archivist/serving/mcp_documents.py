"""Each source as a resource, and the list and read tools of `archivist mcp --tools all`.

The tools are the agent's own (archivist.agent.documents), with their schemas as a model
sees them; the results ride along as structured content. A resource is one source of a
served store, `archivist://<store>/<source>` (the source's name percent-encoded), whose text
is the source as `archivist read` gives it: its stored text, in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import anyio
from mcp import types
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter
from typing_extensions import TypedDict

from archivist.agent.document_args import ListArgs, ReadArgs
from archivist.agent.documents import (
    describe_list,
    describe_read,
    list_name,
    make_list_tool,
    make_read_tool,
    read_document,
    read_name,
)
from archivist.tools.documents import list_sources
from archivist.tools.errors import ArchivistError
from archivist.tools.passage import Passage

if TYPE_CHECKING:
    from archivist.app import Archivist
    from archivist.serving.mcp import StoreTools
    from archivist.tools.store import KnowledgeStore

SCHEME = "archivist"
LIST_SCHEMA = ListArgs.model_json_schema()
# An MCP client has no turn of numbered passages to read around: it names the source.
READ_SCHEMA = {
    **ReadArgs.model_json_schema(),
    "properties": {
        k: v for k, v in ReadArgs.model_json_schema()["properties"].items() if k != "around"
    },
    "required": ["source"],
}
READ_SCHEMA["properties"].pop("turn", None)


class DocumentOutput(TypedDict):
    """A list or read tool's structured content: the listing's entries, or the part read, as
    passages (`source`, `text`, `metadata` …, as a search's results are)."""

    results: list[Passage]


# Declared as the search tools' is, so a client can check and read the structured content.
DOCUMENT_OUTPUT_SCHEMA = TypeAdapter(DocumentOutput).json_schema()


def document_tools(store: KnowledgeStore) -> list[types.Tool]:
    """A store's list and read tools, as MCP describes them."""
    return [
        types.Tool(
            name=list_name(store.name),
            description=describe_list(store),
            input_schema=LIST_SCHEMA,
            output_schema=DOCUMENT_OUTPUT_SCHEMA,
        ),
        types.Tool(
            name=read_name(store.name),
            description=describe_read(store),
            input_schema=READ_SCHEMA,
            output_schema=DOCUMENT_OUTPUT_SCHEMA,
        ),
    ]


def call(
    archivist: Archivist, served: Sequence[str], name: str, arguments: dict[str, Any]
) -> types.CallToolResult | None:
    """Run a list or read tool of a served store (None: `name` is no such tool)."""
    for store_name in served:
        if name == list_name(store_name):
            make = make_list_tool
        elif name == read_name(store_name):
            if "around" in arguments:
                raise MCPError(types.INVALID_PARAMS, f"{name} takes `source`, not `around`.")
            make = make_read_tool
        else:
            continue
        tool = make(archivist.store(store_name))
        message = tool.invoke({"name": name, "args": arguments, "id": "mcp", "type": "tool_call"})
        return types.CallToolResult(
            content=[types.TextContent(text=message.content)],
            structured_content={"results": list(message.artifact)},
        )
    return None


def uri_of(store: str, source: str) -> str:
    """The resource address of a store's source."""
    return f"{SCHEME}://{store}/{quote(source, safe='/')}"


# Sources a `resources/list` page holds; the client asks for the next with its cursor.
PAGE = 500


def resources(
    archivist: Archivist, only: Sequence[str], cursor: str | None = None
) -> types.ListResourcesResult:
    """One page of the served stores' sources, as resources, from `cursor` (a resource
    index, as the previous page's `next_cursor` gave it)."""
    try:
        start = int(cursor or 0)
    except ValueError:
        raise MCPError(
            types.INVALID_PARAMS, f"Unknown cursor {cursor!r}: pass the nextCursor a page gave."
        ) from None
    page: list[types.Resource] = []
    seen = 0
    for name in only or archivist.store_names():
        for entry in list_sources(archivist.store(name)):
            seen += 1
            if seen <= start:
                continue
            if len(page) == PAGE:
                return types.ListResourcesResult(resources=page, next_cursor=str(start + PAGE))
            page.append(
                types.Resource(
                    uri=uri_of(name, entry.source),
                    name=f"{name}/{entry.source}",
                    title=entry.title,
                    description=f"{entry.kind or 'document'} in the store '{name}'",
                    mime_type="text/plain",
                    size=entry.size,
                )
            )
    return types.ListResourcesResult(resources=page)


def read_resource(archivist: Archivist, only: Sequence[str], uri: str) -> str:
    """A resource's text: its source as stored, in order."""
    prefix = f"{SCHEME}://"
    store, _, source = uri.removeprefix(prefix).partition("/")
    served = only or archivist.store_names()
    if not uri.startswith(prefix) or store not in served or not source:
        raise MCPError(
            types.INVALID_PARAMS,
            f"No resource {uri}: resources are {prefix}<store>/<source>, as resources/list "
            "gives them.",
        )
    try:
        reading = read_document(archivist.store(store), unquote(source))
    except (ValueError, ArchivistError) as exc:
        raise MCPError(types.INVALID_PARAMS, str(exc)) from None
    return "\n".join(line.text for line in reading.lines)


def resource_handlers(tools: StoreTools) -> dict[str, Any]:
    """The server's resources/list and resources/read handlers over `tools`' stores."""

    def listed(cursor: str | None) -> types.ListResourcesResult:
        with tools.opened() as archivist:
            return resources(archivist, tools.only, cursor)

    def read(uri: str) -> str:
        with tools.opened() as archivist:
            return read_resource(archivist, tools.only, uri)

    async def on_list(ctx: Any, params: types.PaginatedRequestParams | None) -> Any:
        return await anyio.to_thread.run_sync(listed, params.cursor if params else None)

    async def on_read(ctx: Any, params: types.ReadResourceRequestParams) -> Any:
        uri = str(params.uri)
        text = await anyio.to_thread.run_sync(read, uri)
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type="text/plain", text=text)]
        )

    return {"on_list_resources": on_list, "on_read_resource": on_read}
