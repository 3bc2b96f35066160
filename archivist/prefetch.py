"""Ask Ollama what a command needs first while the command's imports load.

`ask` and `chat` start with the chat model's /api/show answer (its context size, tools and
thinking), but only after importing LangChain, LangGraph and the store, about a second of
CPU. So the request goes out at once, from a thread and with the standard library alone, and
`models.show` takes its answer. A prefetch that fails is forgotten: `models.show` then asks
itself and reports a failure as it always does. A prefetch still unanswered when its time is
up (ARCHIVIST_TIMEOUT from when it was sent, however slowly the answer drips) is a timeout.
"""

import json
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from archivist.settings import split_credentials

_SHOWS: dict[tuple[str, str], tuple[Future, float]] = {}


def _show(host: str, model: str, timeout: float) -> dict[str, Any]:
    address, credentials = split_credentials(host)
    request = urllib.request.Request(
        f"{address.rstrip('/')}/api/show",
        data=json.dumps({"model": model}).encode(),
        headers={"Content-Type": "application/json", **credentials},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def start_show(host: str, model: str, timeout: float) -> None:
    """Send /api/show for `model` in the background; `take_show` collects the answer."""
    _SHOWS[(host, model)] = (_started(host, model, timeout), time.monotonic() + timeout)


def _started(host: str, model: str, timeout: float) -> Future:
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(_show(host, model, timeout))
        except Exception as exc:  # any failure: models.show asks again and explains it
            future.set_exception(exc)

    threading.Thread(target=run, name="prefetch-show", daemon=True).start()
    return future


def _answer(future: Future, deadline: float) -> dict[str, Any]:
    """The answer, once it came whole; TimeoutError when the deadline passes first (the
    thread reading it is left to end on its own: it holds nothing)."""
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        raise TimeoutError("Ollama did not answer /api/show in time") from None


def missing(host: str, names: list[str], timeout: float) -> list[str] | None:
    """Return the models Ollama answers 404 for, or None if Ollama cannot be asked.

    A prefetched answer is looked at, not taken: the agent still finds it. The standard
    library alone, so a command that finds nothing missing has not waited for the Ollama
    client's imports to know it.
    """
    absent = []
    for name in dict.fromkeys(names):
        prefetched = _SHOWS.get((host, name))
        if prefetched is None:
            prefetched = (_started(host, name, timeout), time.monotonic() + timeout)
        try:
            _answer(*prefetched)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return None
            absent.append(name)
        except Exception:  # Ollama down or too slow: the command itself says what to do
            return None
    return absent


def take_show(host: str, model: str) -> dict[str, Any] | None:
    """Return the prefetched /api/show answer for `model` (once), or None if there is none
    or it failed; raise TimeoutError if it is not whole by its deadline."""
    prefetched = _SHOWS.pop((host, model), None)
    if prefetched is None:
        return None
    try:
        return _answer(*prefetched)
    except TimeoutError:
        raise
    except Exception:
        return None
