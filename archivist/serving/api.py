"""The HTTP side of `archivist serve`: `GET /v1/models` and `POST /v1/chat/completions`, whole
or streamed as server-sent events, over Starlette and uvicorn (both come with the MCP SDK).

Each turn runs in a worker thread (anyio's pool), so a slow client or a long answer never
holds up the others; a streamed turn's events cross to the event loop as they happen. A
client that goes away stops its turn at its next event.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import socket
import sys
import threading
import traceback
from collections.abc import AsyncIterator, Callable
from ipaddress import ip_address
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from archivist.serving.completions import (
    CHAT_MODEL_HEADER,
    MODEL,
    APIError,
    ChatRequest,
    ChatService,
    Completion,
    StreamedAnswer,
    api_error,
    extra,
)
from archivist.tools.errors import ArchivistError
from archivist.turnlog import TurnStopped

MAX_BODY = 4 * 1024 * 1024
"""Bytes a request's body may have (a conversation of a few hundred pages of text)."""
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    """Whether an address to listen on is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class _Stopped(Exception):
    """The client of a streamed turn went away: the turn stops at its next event."""

    def __str__(self) -> str:
        return "the client went away"


def _error(error: APIError) -> JSONResponse:
    return JSONResponse(error.body(), status_code=error.status)


class Guard:
    """Refuse, before any route runs, a request from a foreign page or without the key.

    Served on a loopback address, the Host must be a loopback name (a web page cannot reach
    the server by rebinding a name of its own) and an Origin, when a browser sends one, a
    loopback origin: the checks `archivist mcp --http` makes. With a key, every request must
    carry it as `Authorization: Bearer KEY`.
    """

    def __init__(self, app: ASGIApp, api_key: str | None, loopback: bool) -> None:
        self.app, self.api_key, self.loopback = app, api_key, loopback

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            refused = self.refusal(Request(scope))
            if refused is not None:
                await _error(refused)(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def refusal(self, request: Request) -> APIError | None:
        headers = request.headers
        if self.loopback:
            host = headers.get("host", "")
            name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
            if name not in LOOPBACK_HOSTS:
                return APIError(
                    403,
                    f"Host '{host}' is not this machine's: Archivist serves on a loopback "
                    "address, for clients on this machine. To serve others, start it with "
                    "--host 0.0.0.0 and --api-key KEY.",
                    "permission_error",
                    code="forbidden_host",
                )
            origin = headers.get("origin")
            if origin and not any(
                origin == f"http://{h}" or origin.startswith(f"http://{h}:") for h in LOOPBACK_HOSTS
            ):
                return APIError(
                    403,
                    f"Requests from web pages at {origin} are refused: only this machine's "
                    "pages may call Archivist from a browser.",
                    "permission_error",
                    code="forbidden_origin",
                )
        if self.api_key is not None:
            scheme, _, given = headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                given.strip().encode(), self.api_key.encode()
            ):
                return APIError(
                    401,
                    "Missing or wrong API key. Send the key archivist serve was given "
                    "(--api-key or ARCHIVIST_API_KEY) as `Authorization: Bearer KEY`; in an "
                    "OpenAI client, as its api_key.",
                    "authentication_error",
                    code="invalid_api_key",
                )
        return None


async def _body(request: Request) -> Any:
    """The request's JSON body, refused past MAX_BODY bytes (before reading it, when the
    client says its length)."""
    too_large = APIError(
        413,
        f"The request body is larger than {MAX_BODY // (1024 * 1024)} MB. Send a shorter "
        "conversation, or ingest long texts into a store and ask about them.",
        code="request_too_large",
    )
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise too_large
    body = bytearray()
    async for piece in request.stream():
        body += piece
        if len(body) > MAX_BODY:
            raise too_large
    try:
        return json.loads(body)
    except ValueError as exc:
        raise APIError(400, f"The request body is not JSON: {exc}.") from None


def _sse(data: Any) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


def _report(exc: BaseException) -> None:
    """Print an unexpected failure on the server's stderr (the client gets its summary)."""
    if not isinstance(exc, APIError | ArchivistError):
        traceback.print_exception(exc, file=sys.stderr)


class Routes:
    """The API's endpoints over a ChatService."""

    def __init__(self, service: ChatService) -> None:
        self.service = service

    async def models(self, request: Request) -> Response:
        try:
            ids = await anyio.to_thread.run_sync(self.service.model_ids)
        except Exception as exc:
            _report(exc)
            return _error(api_error(exc, self.service.settings))
        listed = [{"id": i, "object": "model", "created": 0, "owned_by": MODEL} for i in ids]
        return JSONResponse({"object": "list", "data": listed})

    async def chat_completions(self, request: Request) -> Response:
        service = self.service
        try:
            chat = ChatRequest.read(await _body(request))
            # Off the event loop: listing the stores may wait for the embedded store's turn.
            named = request.headers.get(CHAT_MODEL_HEADER)
            target = await anyio.to_thread.run_sync(service.resolve, chat.model, named)
            setup = await anyio.to_thread.run_sync(service.setup, target)
            if not chat.stream:
                return await self._whole(setup, chat)
            return await self._streamed(setup, chat)
        except Exception as exc:
            _report(exc)
            return _error(api_error(exc, service.settings))

    async def _whole(self, setup: Any, chat: ChatRequest) -> Response:
        answer = StreamedAnswer()
        reasoning: list[str] = []

        def heard(event: Any) -> None:
            if (delta := answer.delta(event)) and "reasoning_content" in delta:
                reasoning.append(delta["reasoning_content"])

        turn = await anyio.to_thread.run_sync(self.service.answer, setup, chat, heard)
        return JSONResponse(Completion(chat.model).whole(turn, "".join(reasoning)))

    async def _streamed(self, setup: Any, chat: ChatRequest) -> Response:
        """Start the turn; answer with an error status if it fails before its first event,
        else with the stream of its events."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        stopped = threading.Event()

        def heard(event: Any) -> None:
            if stopped.is_set():
                raise TurnStopped  # the client went away
            loop.call_soon_threadsafe(queue.put_nowait, ("event", event))

        async def run() -> None:
            try:
                turn = await anyio.to_thread.run_sync(self.service.answer, setup, chat, heard)
            except Exception as exc:
                queue.put_nowait(("error", exc))
            else:
                queue.put_nowait(("done", turn))

        task = asyncio.ensure_future(run())
        first = await queue.get()
        if first[0] == "error":
            raise first[1]
        return StreamingResponse(
            self._events(chat, first, queue, stopped, task),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def _events(
        self,
        chat: ChatRequest,
        first: tuple[str, Any],
        queue: asyncio.Queue[tuple[str, Any]],
        stopped: threading.Event,
        task: asyncio.Future,  # held here: the event loop keeps only a weak reference
    ) -> AsyncIterator[bytes]:
        completion = Completion(chat.model)
        answer = StreamedAnswer()
        try:
            yield _sse(completion.chunk({"role": "assistant", "content": ""}))
            item = first
            while item[0] == "event":
                if delta := answer.delta(item[1]):
                    yield _sse(completion.chunk(delta))
                item = await queue.get()
            if item[0] == "error":
                _report(item[1])
                yield _sse(api_error(item[1], self.service.settings).body())
                return
            turn = item[1]
            if ending := answer.ending(turn):
                yield _sse(completion.chunk({"content": ending}))
            yield _sse(completion.chunk({}, "stop", **{MODEL: extra(turn)}))
            if chat.include_usage:
                yield _sse(completion.usage_chunk(turn))
            yield _sse("[DONE]")
        finally:
            stopped.set()  # a client gone: its turn stops at its next event


def build_app(service: ChatService, api_key: str | None, loopback: bool = True) -> ASGIApp:
    """The API as an ASGI application: the routes behind the Host, Origin and key checks."""
    routes = Routes(service)

    async def not_found(request: Request, exc: Exception) -> Response:
        return _error(
            APIError(
                404,
                f"No endpoint {request.method} {request.url.path}. Archivist serves GET "
                "/v1/models and POST /v1/chat/completions.",
                "not_found_error",
            )
        )

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return _error(APIError(405, f"{request.url.path} does not take {request.method}."))

    app = Starlette(
        routes=[
            Route("/v1/models", routes.models, methods=["GET"]),
            Route("/v1/chat/completions", routes.chat_completions, methods=["POST"]),
        ],
        exception_handlers={404: not_found, 405: not_allowed},
    )
    return Guard(app, api_key, loopback)


def bind(host: str, port: int) -> socket.socket:
    """Take the address for `serve`, or say why it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        sock.close()
        raise ArchivistError(
            f"Cannot serve on {host}:{port}: {exc.strerror or exc}.",
            "Choose another port with --port PORT (or another address with --host).",
        ) from None
    return sock


def serve(
    service: ChatService,
    host: str,
    port: int,
    api_key: str | None,
    on_ready: Callable[[str, list[str]], None],
) -> None:
    """Serve the API until interrupted: check the stores, take the address, then listen.

    Off a loopback address the API is open to the network: it is served only with a key."""
    loopback = is_loopback(host)
    if not loopback and not api_key:
        raise ArchivistError(
            f"Serving on {host} opens your stores to the network: it needs a key.",
            "Give one with --api-key KEY (or ARCHIVIST_API_KEY); clients send it as their "
            "API key. Or serve on 127.0.0.1 for this machine only.",
        )
    service.check()
    sock = bind(host, port)
    import uvicorn

    shown = f"[{host.strip('[]')}]" if ":" in host else host
    on_ready(f"http://{shown}:{sock.getsockname()[1]}/v1", service.model_ids())
    config = uvicorn.Config(
        build_app(service, api_key, loopback),
        log_level="warning",
        timeout_graceful_shutdown=3,
        backlog=256,
    )
    uvicorn.Server(config).run(sockets=[sock])
