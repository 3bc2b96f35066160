"""Ollama requests for commands that must start fast: one HTTP/1.1 exchange on a socket.

The ollama client and httpx cost a command ~0.2–0.5 s of CPU to import (httpx loads its own
command line's libraries), and even the standard library's `http.client` ~40 ms (it loads
`ssl` and the e-mail parser for every connection, TLS or not); `search` needs one request
and an unchanged `ingest` or `sync` one more. These send them as every client to Ollama is
made (archivist.deadline): the whole exchange over within ARCHIVIST_TIMEOUT, first byte to
last, however slowly a server drips. What is read: the status line, the headers, and a body
of a stated length, in chunks, or up to the connection's end (each request asks the server
to close it after answering); `ssl` is imported for an https host only.
"""

import contextlib
import re
import socket
import threading
import time
from urllib.parse import urljoin, urlsplit

import orjson

from archivist.settings import Settings, split_credentials

REDIRECTS = 3
OLLAMA_DEFAULT_NUM_CTX = 2048
"""The context window Ollama gives a model whose Modelfile sets no num_ctx."""
MAX_HEADER_LINE = 65536
MAX_HEADERS = 100


def post(url: str, body: bytes, headers: dict[str, str], seconds: float) -> tuple[int, bytes]:
    """POST `body` to `url` and return the answer's status and body, the whole exchange
    (redirects followed) over within `seconds`: each socket operation is given only what
    is left of it, and a timer shuts the socket at the deadline, so a server dripping a byte
    at a time is cut too, in its headers as in its body."""
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
    import ssl

    try:
        return ssl.create_default_context().wrap_socket(sock, server_hostname=parts.hostname)
    except BaseException:
        sock.close()
        raise


def _request(parts, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port:
        host += f":{parts.port}"
    fields = {
        "Host": host,
        "Accept-Encoding": "identity",
        "Connection": "close",
        **headers,
        "Content-Length": str(len(body)),
    }
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items())
    return f"POST {path} HTTP/1.1\r\n{head}\r\n".encode("latin-1") + body


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


class Cut(Exception):
    """The connection broke before the answer was whole: the request may pass when sent again."""


def show(settings: Settings, model: str) -> dict | None:
    """Ollama's /api/show answer for `model`; None if it gave none (down, an error, not JSON):
    the caller then takes the model factory's way, which says why."""
    host, credentials = split_credentials(settings.ollama_host.rstrip("/"))
    headers = {"Content-Type": "application/json", **credentials}
    try:
        status, content = post(
            f"{host}/api/show", orjson.dumps({"model": model}), headers, settings.timeout
        )
        answer = orjson.loads(content) if status == 200 else None
    except (OSError, Cut, orjson.JSONDecodeError):
        return None
    return answer if isinstance(answer, dict) else None


def context_of(model_info: dict, parameters: str) -> int:
    """How many tokens a model reads per input as Ollama runs it: its trained context, capped
    by the Modelfile's num_ctx (Ollama's default when unset)."""
    trained = next((v for k, v in model_info.items() if k.endswith(".context_length")), None)
    match = re.search(r"^num_ctx\s+(\d+)", parameters or "", re.M)
    num_ctx = int(match.group(1)) if match else OLLAMA_DEFAULT_NUM_CTX
    return min(trained, num_ctx) if trained else num_ctx
