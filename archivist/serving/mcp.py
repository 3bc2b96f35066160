"""`archivist mcp`: the stores' search tools for MCP clients (desktop apps, IDEs, other agents).

Each store is served as the agent sees it: a tool named `search_<store>` with the agent's
description of the store, the agent tool's arguments, and the same numbered passages with
their sources (the results in the shape of `archivist search --json` ride along as structured
content). A `list_stores` tool tells what there is. Every source is a resource
(`archivist://<store>/<source>`) whose text is the source as `read` gives it; with
`--tools all`, each store also has its `list_<store>` and `read_<store>` tools
(archivist.agent.documents). The server keeps its stores open between requests, as a chat
does: the embedded store's lease is given up whenever another process asks for it
(`archivist ingest` updates a store while a client stays connected), and taken again, the
store opened anew, by the next request. Opening a store for each request instead cost most
of a search at scale (~0.7 s a search at 100,000 chunks: the shard loaded and its files read
from disk again every time).
"""

import json
import socket
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NotRequired

import anyio
from langchain_core.tools import ToolException
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from archivist.agent.retrieval import describe, tool_name
from archivist.agent.search_args import SearchArgs
from archivist.app import Archivist
from archivist.serving import mcp_documents
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError, StoreDamaged
from archivist.tools.passage import Passage
from archivist.version import __version__

LIST_STORES = "list_stores"
SERVER_NAME = "archivist"
HTTP_PATH = "/mcp"
INSTRUCTIONS = (
    "Archivist searches the user's own document stores. Call list_stores to see them, then "
    "search_<store> with a query; cite the passages you use by their source."
)
# The agent's own argument schema: a model gets the same tool whichever way it reaches it.
SEARCH_SCHEMA = SearchArgs.model_json_schema()


class SearchOutput(TypedDict):
    """A search tool's structured content: the passages as `archivist search --json` prints
    them, and with reranking the model that reranked them and the milliseconds it took."""

    results: list[Passage]
    rerank_model: NotRequired[str]
    rerank_ms: NotRequired[float]


class StoresOutput(TypedDict):
    """`list_stores`' structured content: the stores as `archivist stores --json` lists them."""

    stores: list[dict[str, Any]]


# Declared, so a client can check and read the structured content without guessing.
SEARCH_OUTPUT_SCHEMA = TypeAdapter(SearchOutput).json_schema()
STORES_OUTPUT_SCHEMA = TypeAdapter(StoresOutput).json_schema()


class StoreTools:
    """The search tools over some stores (all by default), for any number of MCP sessions."""

    def __init__(self, settings: Settings, stores: Sequence[str] = ()) -> None:
        self.settings = settings
        self.only = list(dict.fromkeys(stores))
        self.documents = settings.tools == "all"
        """Whether each store's list and read tools are served beside its search."""
        # One request at a time uses the stores: the embedded store's client is not shared
        # between threads at once.
        self._lock = threading.Lock()
        self._archivist: Archivist | None = None
        # Each store's search tool as built for the store's fingerprint (its embedding model
        # and prefixes): built once, not at every call (its description lists the store's
        # sources: a facet over the whole store), and its store keeps what it counted
        # between calls (the partly stored versions, counted again only after a write).
        self._searches: dict[tuple[str, str], Any] = {}

    @contextmanager
    def opened(self) -> Iterator[Archivist]:
        """The stores for one request: opened by the first, kept for the next ones (the
        embedded store's lease yields to any other process meanwhile); released when a
        request fails on the store's side (not the caller's arguments), so the next one
        starts afresh."""
        with self._lock:
            if self._archivist is None:
                self._archivist = Archivist(self.settings)
            try:
                yield self._archivist
            except (ValidationError, ToolException, MCPError):
                raise
            except BaseException:
                self._close()
                raise

    def close(self) -> None:
        """Release the stores (at the server's end)."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        self._searches.clear()
        if self._archivist is not None:
            archivist, self._archivist = self._archivist, None
            archivist.close()

    def check(self) -> None:
        """Refuse to serve a store that does not exist (a client would miss its tool), or a
        rerank model that cannot rerank."""
        with self.opened() as archivist:
            for name in self.only:
                archivist.store(name)
            archivist.reranker  # noqa: B018 - building it checks the model once

    def tools(self) -> list[types.Tool]:
        """Describe `list_stores` and one search tool per store."""
        tools = [
            types.Tool(
                name=LIST_STORES,
                description=(
                    "List the document stores Archivist can search: each one's search tool, "
                    "description, size and embedding model."
                ),
                input_schema={"type": "object", "properties": {}},
                output_schema=STORES_OUTPUT_SCHEMA,
            )
        ]
        try:
            with self.opened() as archivist:
                for name in self.only or archivist.store_names():
                    store = archivist.store(name, must_exist=False)
                    try:
                        if not store.exists():
                            continue
                        description = describe(store)
                    except StoreDamaged as exc:  # its calls say so; the others are served
                        description = f"{exc.message} {exc.fix}"
                    tools.append(
                        types.Tool(
                            name=tool_name(name),
                            description=description,
                            input_schema=SEARCH_SCHEMA,
                            output_schema=SEARCH_OUTPUT_SCHEMA,
                        )
                    )
                    if self.documents:
                        tools += mcp_documents.document_tools(store)
        except ArchivistError as exc:  # a store locked by an ingest, say: worth reading
            raise MCPError(types.INTERNAL_ERROR, str(exc)) from None
        return tools

    def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        """Run a tool; a failure the caller can act on comes back as an error result."""
        try:
            with self.opened() as archivist:
                return self._call(archivist, name, arguments)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            return _error(f"Invalid arguments for {name}: {problems}.")
        except (ToolException, ArchivistError) as exc:
            return _error(str(exc))

    def _call(
        self, archivist: Archivist, name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name == LIST_STORES:
            listing = archivist.stores(only=self.only or None)
            return _result(json.dumps(listing, ensure_ascii=False), {"stores": listing})
        served = self.only or archivist.store_names()
        if self.documents and (found := mcp_documents.call(archivist, served, name, arguments)):
            return found
        if name not in map(tool_name, served):
            tools = ", ".join([*map(tool_name, served), LIST_STORES])
            raise MCPError(types.INVALID_PARAMS, f"Unknown tool '{name}'. Tools: {tools}.")
        store = archivist.store(name.removeprefix("search_"))
        key = (store.name, json.dumps(store.fingerprint, sort_keys=True))
        tool = self._searches.get(key)
        if tool is None:
            tool = self._searches[key] = archivist.retrieval_tool(store)
        try:
            message = tool.invoke(
                {"name": tool.name, "args": arguments, "id": "mcp", "type": "tool_call"}
            )
        except Exception as exc:
            error = archivist.query_error(store, exc)
            if error is exc:
                raise
            raise error from None
        found = message.artifact
        structured: dict[str, Any] = {"results": found.passages}
        if found.reranked_by is not None:
            structured.update(rerank_model=found.reranked_by, rerank_ms=found.rerank_ms)
        return _result(message.content, structured)


def _result(text: str, structured: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(
        content=[types.TextContent(text=text)], structured_content=structured
    )


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], is_error=True)


def build_server(tools: StoreTools) -> Server:
    """Build the MCP server over `tools`; the stores' work runs off the event loop."""

    async def list_tools(
        ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await anyio.to_thread.run_sync(tools.tools))

    async def call_tool(
        ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await anyio.to_thread.run_sync(tools.call, params.name, params.arguments or {})

    return Server(
        SERVER_NAME,
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        **mcp_documents.resource_handlers(tools),
    )


def serve_stdio(tools: StoreTools) -> None:
    """Serve MCP over stdin and stdout until the client closes them (desktop clients, IDEs)."""
    _run_stdio(build_server(tools))


def refuse_stdio(error: ArchivistError) -> None:
    """Tell an MCP client over stdio why nothing can be served (a store that does not exist,
    say), until it closes the connection: the client connects, and its listing and calls
    fail with the message and its fix, which it can show. Exiting at once, the server would
    leave the client only "Connection closed"."""

    async def refuse(ctx: ServerRequestContext, params: Any) -> Any:
        raise MCPError(types.INTERNAL_ERROR, str(error))

    _run_stdio(
        Server(
            SERVER_NAME,
            version=__version__,
            instructions=f"Archivist cannot serve: {error}",
            on_list_tools=refuse,
            on_call_tool=refuse,
        )
    )


def _run_stdio(server: Server) -> None:
    async def run() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(run)


def http_socket(port: int, host: str = "127.0.0.1") -> socket.socket:
    """Take the port for `serve_http`, or say why it cannot be had."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ArchivistError(
            f"Cannot serve MCP on {host}:{port}: {exc.strerror or exc}.",
            "Choose another port with --http PORT.",
        ) from None
    return sock


def serve_http(tools: StoreTools, sock: socket.socket, host: str = "127.0.0.1") -> None:
    """Serve MCP over streamable HTTP at /mcp on a bound socket until interrupted."""
    import uvicorn

    app = build_server(tools).streamable_http_app(streamable_http_path=HTTP_PATH, host=host)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
