"""An HTTP transport that bounds a whole request in time, not each read.

httpx's timeouts hold for one network operation each: a server (or a proxy) that sends one
byte a second never trips a 30-second read timeout, and a request to it never ends. Here every
read, write and connect of a request is given only what is left of the request's deadline,
and once it has passed the request fails with httpx's own timeout errors.

The deadline counts from the request's first byte to its answer's last. A streamed answer
(NDJSON: a chat's tokens, a pull's progress) gets the whole time again each time one of its
lines is complete: an answer may take longer than the timeout while it keeps coming, but a
stream that stops or drips slower than a line per timeout is cut. Every layer may use it: the
Ollama seam's client libraries, and the crawler (`renew_streams=False`: a page is whole within
its deadline, whatever its type says).
"""

import time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import httpx

_DEADLINE: ContextVar[float | None] = ContextVar("archivist_http_deadline", default=None)
"""When the request being read or written in this thread must be over (time.monotonic)."""

STREAMED = "application/x-ndjson"


def _left(timeout: float | None, expired: str) -> float | None:
    """The time an operation may take: its own timeout, capped by what is left of the
    deadline; raise httpcore's `expired` error when nothing is left."""
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        import httpcore

        raise getattr(httpcore, expired)("the request took longer than its deadline")
    return left if timeout is None else min(timeout, left)


class _Stream:
    """A connection whose reads and writes end by the current request's deadline."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _left(timeout, "ReadTimeout"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _left(timeout, "WriteTimeout"))

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> "_Stream":
        left = _left(timeout, "ConnectTimeout")
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _Backend:
    """httpcore's network backend, making connections that keep the deadline."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        left = _left(timeout, "ConnectTimeout")
        return _Stream(self._inner.connect_tcp(host, port, left, local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        left = _left(timeout, "ConnectTimeout")
        return _Stream(self._inner.connect_unix_socket(path, left, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _Body(httpx.SyncByteStream):
    """An answer's body, read under its request's deadline (renewed per line if streamed)."""

    def __init__(self, inner: Any, deadline: float, renew: float | None) -> None:
        self._inner, self._deadline, self._renew = inner, deadline, renew

    def __iter__(self) -> Iterator[bytes]:
        chunks = iter(self._inner)
        while True:
            token = _DEADLINE.set(self._deadline)
            try:
                chunk = next(chunks, None)
            finally:
                _DEADLINE.reset(token)
            if chunk is None:
                return
            if self._renew is not None and b"\n" in chunk:
                self._deadline = time.monotonic() + self._renew
            yield chunk

    def close(self) -> None:
        token = _DEADLINE.set(self._deadline)
        try:
            self._inner.close()
        finally:
            _DEADLINE.reset(token)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's transport, with each request over within `seconds` (see the module doc)."""

    def __init__(self, seconds: float, renew_streams: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seconds = seconds
        self.renew_streams = renew_streams
        """Whether an NDJSON answer gets the whole time again with each line (False: every
        answer must be whole within `seconds`, whatever its type says)."""
        # httpcore takes its network backend only when the pool is made, which httpx does
        # in its own constructor: the pool's connections are all made through this one.
        self._pool._network_backend = _Backend(self._pool._network_backend)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        deadline = time.monotonic() + self.seconds
        token = _DEADLINE.set(deadline)
        try:
            response = super().handle_request(request)
        finally:
            _DEADLINE.reset(token)
        streamed = self.renew_streams and response.headers.get("content-type", "").startswith(
            STREAMED
        )
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=_Body(response.stream, deadline, self.seconds if streamed else None),
            extensions=response.extensions,
        )
