"""`mcp` and `serve`: the stores served to other programs."""

import sys
from typing import TYPE_CHECKING, Annotated

import typer
import typer.main

from archivist.cli.common import (
    ModelOpt,
    RerankCandidatesOpt,
    RerankOpt,
    ToolsOpt,
    _app,
    _notice,
    _rerank,
    _settings,
    _toolset,
    app,
)
from archivist.tools.errors import (
    ArchivistError,
)

if TYPE_CHECKING:
    pass


@app.command()
def mcp(
    stores: Annotated[
        list[str] | None,
        typer.Option("--store", "-s", help="A store to serve (repeatable). Default: all."),
    ] = None,
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            min=1,
            max=65535,
            help="Serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio.",
        ),
    ] = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
    toolset: ToolsOpt = None,
) -> None:
    """Serve the stores' search tools to MCP clients (desktop apps, IDEs), over stdio or HTTP;
    with --tools all, their list and read tools too, and every source as a resource."""
    from archivist.serving.mcp import (
        HTTP_PATH,
        StoreTools,
        http_socket,
        refuse_stdio,
        serve_http,
        serve_stdio,
    )

    tools = StoreTools(
        _settings(**_rerank(rerank, rerank_candidates), **_toolset(toolset)), stores or []
    )
    try:
        tools.check()
    except ArchivistError as exc:
        tools.close()
        if http is None and not sys.stdin.isatty():
            refuse_stdio(exc)  # the client that started it is told why, then the command fails
        raise
    try:
        if http is None:
            serve_stdio(tools)
            return
        sock = http_socket(http)
        _notice(f"Serving MCP at http://127.0.0.1:{http}{HTTP_PATH} (Ctrl-C stops).")
        serve_http(tools, sock)
    finally:
        tools.close()


@app.command()
def serve(
    stores: Annotated[
        list[str] | None,
        typer.Option("--store", "-s", help="A store to serve (repeatable). Default: all."),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            "--host", help="The address to listen on (another than 127.0.0.1 needs --api-key)."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="The port.")] = 8000,
    api_key: Annotated[
        str | None,
        typer.Option(
            "--api-key",
            help="Ask clients for this key (Authorization: Bearer KEY). Default: "
            "ARCHIVIST_API_KEY, else none.",
        ),
    ] = None,
    model: ModelOpt = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
) -> None:
    """Serve the stores as models behind the OpenAI chat-completions API (/v1)."""
    from archivist.serving.api import serve as serve_api
    from archivist.serving.completions import ChatService

    archivist = _app(chat_model=model, api_key=api_key, **_rerank(rerank, rerank_candidates))

    def ready(url: str, models: list[str]) -> None:
        _notice(f"Serving the OpenAI API at {url} (Ctrl-C stops). Models: {', '.join(models)}.")

    serve_api(ChatService(archivist, stores or []), host, port, archivist.settings.api_key, ready)
