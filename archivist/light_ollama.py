"""Ollama requests for commands that must start fast: the standard library's HTTP client.

The ollama client and httpx cost a command ~0.2–0.5 s of CPU to import (httpx loads its own
command line's libraries); `search` needs one request and an unchanged `ingest` or `sync`
one more. These send them as every client to Ollama is made (archivist.deadline): the whole
exchange over within ARCHIVIST_TIMEOUT, first byte to last, however slowly a server drips.
"""

import contextlib
import http.client
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


def post(url: str, body: bytes, headers: dict[str, str], seconds: float) -> tuple[int, bytes]:
    """POST `body` to `url` and return the answer's status and body, the whole exchange
    (redirects followed) over within `seconds`: each socket operation is given only what
    is left of it, and a timer shuts the socket at the deadline, so a server dripping a byte
    at a time is cut too, in its headers (which http.client reads without us) as in its
    body."""
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
        kind = (
            http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        )
        connection = kind(parts.hostname, parts.port, timeout=left())
        try:
            try:
                connection.connect()
            except (ConnectionError, OSError) as exc:
                if isinstance(exc, TimeoutError):
                    raise
                raise ConnectionError(f"Failed to connect to Ollama at {origin}.") from None
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            sock = connection.sock  # the answer is read from it after the connection lets go
            expired = threading.Event()
            timer = threading.Timer(left(), _shut, (sock, expired))
            timer.daemon = True
            timer.start()
            try:
                sock.settimeout(left())
                connection.request("POST", path, body, headers)
                sock.settimeout(left())
                response = connection.getresponse()
                location = response.getheader("Location")
                chunks = []
                while True:
                    sock.settimeout(left())
                    chunk = response.read1(65536)
                    if not chunk:
                        break
                    chunks.append(chunk)
                if expired.is_set():  # the end it read was the timer's shutting, not Ollama's
                    raise too_late()
            except (http.client.HTTPException, OSError) as exc:
                if expired.is_set():
                    raise too_late() from None
                if isinstance(exc, http.client.IncompleteRead | http.client.RemoteDisconnected):
                    raise Cut(f"Ollama stopped before the answer was complete ({exc!r})") from None
                if isinstance(exc, ConnectionError):  # reset, broken pipe
                    raise Cut(str(exc) or type(exc).__name__) from None
                raise
            finally:
                timer.cancel()
        finally:
            connection.close()
        if response.status in (307, 308) and location:
            url = urljoin(url, location)
            continue
        return response.status, b"".join(chunks)
    raise ConnectionError(f"Ollama at {origin} redirected more than {REDIRECTS} times.")


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
