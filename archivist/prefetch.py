"""Ask Ollama what a command needs first while the command's imports load.

`ask` and `chat` start with the chat model's /api/show answer (its context size, tools and
thinking), but only after importing LangChain, LangGraph and the store, about a second of
CPU. So the request goes out at once, from a thread and with the standard library alone, and
`models.show` takes its answer. A prefetch that fails is forgotten: `models.show` then asks
itself and reports a failure as it always does.
"""

import json
import threading
import urllib.error
import urllib.request
from concurrent.futures import Future
from typing import Any

_SHOWS: dict[tuple[str, str], Future] = {}


def _show(host: str, model: str, timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{host.rstrip('/')}/api/show",
        data=json.dumps({"model": model}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def start_show(host: str, model: str, timeout: float) -> None:
    """Send /api/show for `model` in the background; `take_show` collects the answer."""
    future: Future = Future()
    _SHOWS[(host, model)] = future

    def run() -> None:
        try:
            future.set_result(_show(host, model, timeout))
        except Exception as exc:  # any failure: models.show asks again and explains it
            future.set_exception(exc)

    threading.Thread(target=run, name="prefetch-show", daemon=True).start()


def missing(host: str, names: list[str], timeout: float) -> list[str] | None:
    """Return the models Ollama answers 404 for, or None if Ollama cannot be asked.

    A prefetched answer is looked at, not taken: the agent still finds it. The standard
    library alone, so a command that finds nothing missing has not waited for the Ollama
    client's imports to know it.
    """
    absent = []
    for name in dict.fromkeys(names):
        prefetched = _SHOWS.get((host, name))
        try:
            if prefetched is not None:
                prefetched.result()
            else:
                _show(host, name, timeout)
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                return None
            absent.append(name)
        except Exception:  # Ollama down: the command itself says how to start it
            return None
    return absent


def take_show(host: str, model: str) -> dict[str, Any] | None:
    """Return the prefetched /api/show answer for `model` (once), or None if there is none."""
    future = _SHOWS.pop((host, model), None)
    if future is None or future.exception() is not None:
        return None
    return future.result()
