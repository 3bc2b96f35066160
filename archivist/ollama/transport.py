"""The one transport to Ollama: an HTTP/1.1 exchange on a socket, over within its deadline,
and the one retry loop for what may pass when sent again.

Every request Archivist writes itself (`/api/show`, `/api/embed`, `/api/version`) goes through
`exchange`: the ollama client and httpx cost a command ~0.2–0.5 s of CPU to import (httpx loads
its own command line's libraries), and even the standard library's `http.client` ~40 ms (it
loads `ssl` and the e-mail parser for every connection, TLS or not). The whole exchange is over
within ARCHIVIST_TIMEOUT, first byte to last, however slowly a server drips (the client
libraries' requests keep the same deadline: `archivist.ollama.clients`). What is read: the
status line, the headers, and a body of a stated length, in chunks, or up to the connection's
end (each request asks the server to close it after answering); `ssl` is imported for an
https host only.
"""

import contextlib
import functools
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urljoin, urlsplit

import orjson

from archivist.tools.retries import with_retries as retrying

T = TypeVar("T")

REDIRECTS = 3
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100


@dataclass(frozen=True)
class Endpoint:
    """Where Ollama answers and how every request to it is made: its address (credentials
    taken out), the header that carries them, and the deadline of each request (seconds)."""

    address: str
    headers: dict[str, str] = field(default_factory=dict)
    timeout: float = 30.0

    @classmethod
    def of(cls, host: str, timeout: float) -> "Endpoint":
        """The endpoint of OLLAMA_HOST `host` (its user and password sent as a header)."""
        from archivist.settings import split_credentials

        address, credentials = split_credentials(host)
        return cls(address.rstrip("/"), credentials, timeout)

    def call(self, path: str, body: dict[str, Any] | None = None, seconds: float | None = None):
        """Send one request (POST with `body` as JSON, else GET) and return its JSON answer;
        an error status raises `ollama.ResponseError` as the ollama client does, an answer
        that is not JSON `UnreadableAnswer`."""
        headers = {"Accept": "application/json", **self.headers}
        if body is not None:
            headers["Content-Type"] = "application/json"
        status, content = exchange(
            f"{self.address}{path}",
            None if body is None else orjson.dumps(body),
            headers,
            self.timeout if seconds is None else seconds,
        )
        if status >= 400:
            import ollama

            # It reads the `error` of a JSON body itself, as from httpx.
            raise ollama.ResponseError(content.decode("utf-8", "replace"), status)
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError:
            problem = "an empty answer" if not content.strip() else "not JSON"
            raise UnreadableAnswer(path, problem) from None


class UnreadableAnswer(Exception):
    """What answered at Ollama's address sent something that is not Ollama's API: not JSON,
    an empty body, numbers that are not numbers, fields of the wrong kind."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


class Cut(ConnectionError):
    """The connection broke before the answer was whole: the request may pass when sent again."""


def exchange(
    url: str, body: bytes | None, headers: dict[str, str], seconds: float
) -> tuple[int, bytes]:
    """Send `body` to `url` (POST; GET without a body) and return the answer's status and body, the
    whole exchange (redirects followed) over within `seconds`: each socket operation is given only
    what is left of it, and a timer shuts the socket at the deadline, so a server dripping a byte at
    a time is cut too, in its headers as in its body."""
    deadline = time.monotonic() + seconds

    def too_late() -> TimeoutError:
        return TimeoutError(f"no whole answer from {origin} within {seconds:g} s")

    def left() -> float:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise too_late()
        return remaining

    for _ in range(REDIRECTS + 1):
        parts = urlsplit(url)
        origin = f"{parts.scheme}://{parts.hostname}"
        try:
            sock = _connect(parts, left())
        except (ConnectionError, OSError) as exc:
            if isinstance(exc, TimeoutError):
                raise
            raise ConnectionError(f"Failed to connect to Ollama at {origin}.") from None
        expired = threading.Event()
        timer = threading.Timer(left(), _shut, (sock, expired))
        timer.daemon = True
        timer.start()
        try:
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            sock.settimeout(left())
            sock.sendall(_request(parts, path, body, headers))
            answer = _Answer(sock, left)
            status, fields = answer.head()
            content = answer.body(fields)
            if expired.is_set():  # the end it read was the timer's shutting, not Ollama's
                raise too_late()
        except (OSError, ValueError) as exc:
            if expired.is_set():
                raise too_late() from None
            if isinstance(exc, ConnectionError):  # reset, broken pipe
                raise Cut(str(exc) or type(exc).__name__) from None
            if isinstance(exc, _Incomplete):
                raise Cut(f"Ollama stopped before the answer was complete ({exc})") from None
            if isinstance(exc, ValueError):
                raise ConnectionError(f"The answer from {origin} is not HTTP's ({exc}).") from None
            raise
        finally:
            timer.cancel()
            with contextlib.suppress(OSError):
                sock.close()
        location = fields.get("location")
        if status in (307, 308) and location:
            url = urljoin(url, location)
            continue
        return status, content
    raise ConnectionError(f"Ollama at {origin} redirected more than {REDIRECTS} times.")


def _connect(parts, seconds: float) -> socket.socket:
    """A connection to the URL's host (TLS for https, checked as browsers check it)."""
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    # An ASCII name as bytes: the resolver then needs no IDNA codec (~2 ms to import).
    name = parts.hostname
    sock = socket.create_connection(
        (name.encode("ascii") if name.isascii() else name, port), timeout=seconds
    )
    if not tls:
        return sock
    try:
        return _tls_context().wrap_socket(sock, server_hostname=parts.hostname)
    except BaseException:
        sock.close()
        raise


@functools.cache
def _tls_context():
    """The TLS settings of every https connection, made once: each would load the certificate
    store again (~0.1 s of CPU), and an ingest opens one per request."""
    import ssl

    return ssl.create_default_context()


def _request(parts, path: str, body: bytes | None, headers: dict[str, str]) -> bytes:
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port:
        host += f":{parts.port}"
    fields = {
        "Host": host,
        "Accept-Encoding": "identity",
        "Connection": "close",
        **headers,
        "Content-Length": str(len(body or b"")),
    }
    if body is None:
        del fields["Content-Length"]
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    method = "GET" if body is None else "POST"
    return f"{method} {path} HTTP/1.1\r\n{head}\r\n".encode("latin-1") + (body or b"")


class _Incomplete(ValueError):
    """The connection ended before the answer it announced."""


class _Answer:
    """An HTTP/1.1 answer read from a socket, each read given what is left of the time."""

    def __init__(self, sock: socket.socket, left) -> None:
        self.sock, self.left = sock, left
        self.file = sock.makefile("rb")

    def line(self) -> bytes:
        self.sock.settimeout(self.left())
        line = self.file.readline(MAX_HEADER_LINE + 1)
        if len(line) > MAX_HEADER_LINE:
            raise ValueError("an answer line longer than 64 KB: not an HTTP server's")
        return line

    def head(self) -> tuple[int, dict[str, str]]:
        """The status and the header fields (names in lower case) of the final answer."""
        while True:
            line = self.line()
            if not line:
                raise _Incomplete("no answer")
            version, _, rest = line.decode("latin-1").partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/") or not code.isdigit():
                raise ValueError(f"not an HTTP answer: {line[:80]!r}")
            fields: dict[str, str] = {}
            while True:
                line = self.line()
                if not line:
                    raise _Incomplete("the headers were cut")
                if line in (b"\r\n", b"\n"):
                    break
                if len(fields) >= MAX_HEADERS:
                    raise ValueError("an answer with more than 100 header fields")
                name, _, value = line.decode("latin-1").partition(":")
                fields[name.strip().lower()] = value.strip()
            if not code.startswith("1"):  # an interim answer (100 Continue) is passed over
                return int(code), fields

    def read(self, size: int) -> bytes:
        data = bytearray()
        while len(data) < size:
            self.sock.settimeout(self.left())
            piece = self.file.read1(min(size - len(data), 65536))
            if not piece:
                raise _Incomplete(f"{len(data)} of {size} bytes")
            data += piece
        return bytes(data)

    def body(self, fields: dict[str, str]) -> bytes:
        if "chunked" in fields.get("transfer-encoding", "").lower():
            chunks = []
            while True:
                size_line = self.line().split(b";", 1)[0].strip()
                if not size_line:
                    raise _Incomplete("a chunk's size was cut")
                size = int(size_line, 16)
                if size == 0:
                    while self.line() not in (b"\r\n", b"\n", b""):
                        pass  # trailer fields
                    return b"".join(chunks)
                chunks.append(self.read(size))
                self.read(2)  # the chunk's CRLF
        length = fields.get("content-length")
        if length is not None:
            return self.read(int(length))
        chunks = []
        while True:  # delimited by the connection's end
            self.sock.settimeout(self.left())
            piece = self.file.read1(65536)
            if not piece:
                return b"".join(chunks)
            chunks.append(piece)


def _shut(sock: socket.socket, expired: threading.Event) -> None:
    """At the deadline: shut the socket, which ends a read waiting on it at once."""
    expired.set()
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


# -- retries ----------------------------------------------------------------------------------

# A request that failed in a way that may pass (`transient`: a 5xx or 429 before the answer's
# first token, a connection cut) is tried this many times, waiting BACKOFF seconds, then twice
# as long each time.
ATTEMPTS = 4
BACKOFF = 1.0


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an error answer from Ollama (`ollama.ResponseError`), else None.
    Without the ollama client imported, no exception can be one (nor is it imported to say so)."""
    client = sys.modules.get("ollama")
    if client is not None and isinstance(exc, client.ResponseError):
        return exc.status_code
    return None


def transient(exc: BaseException) -> bool:
    """Whether a request that failed so may pass if sent again: Ollama busy or restarting its
    runner (a 5xx or 429), or the connection cut under it. Not a refused connection (Ollama
    is not running) nor a timeout (the wait is already as long as the user allows)."""
    status = status_of(exc)
    if status is not None:
        return status >= 500 or status == 429
    if isinstance(exc, Cut):
        return True
    httpx = sys.modules.get("httpx")
    cut = () if httpx is None else (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
    return isinstance(exc, cut)


def why(exc: BaseException) -> str:
    """What went wrong with a request that is tried again, in words."""
    status = status_of(exc)
    if status is not None:
        return f"Ollama answered with an error ({exc.error})"  # type: ignore[attr-defined]
    return f"The connection to Ollama was cut ({exc or type(exc).__name__})"


def announce(exc: BaseException, attempt: int, wait: float, attempts: int) -> None:
    """Tell the turn's listeners (the chat's view, `ask`'s stderr) about a retry: a `Retried`
    event. Outside a LangGraph run (LangChain not even imported) there is none to tell."""
    if "langchain_core" not in sys.modules:
        return
    from langchain_core.callbacks import dispatch_custom_event

    from archivist.tools.progress import CHANNEL, Retried

    # Outside a graph run there is no listener to tell, and dispatching raises.
    with contextlib.suppress(RuntimeError):
        dispatch_custom_event(CHANNEL, Retried(why(exc), attempt, wait, "chat", attempts - 1))


def with_retries(
    send: Callable[[], T],
    *,
    may_retry: Callable[[BaseException], bool] = transient,
    on_retry: Callable[[BaseException, int, float, int], None] = announce,
) -> T:
    """Send a request, sending it again while it fails in a way that may pass (`may_retry`),
    up to ATTEMPTS times in all, waiting BACKOFF seconds, then twice as long each time; each
    retry is announced (`on_retry`) before its wait (the retry loop:
    `archivist.tools.retries`)."""
    return retrying(send, may_retry, attempts=ATTEMPTS, backoff=BACKOFF, on_retry=on_retry)
