"""Ask Ollama what a command needs first while the command's imports load.

`ask` and `chat` start with the chat model's /api/show answer (its context size, tools and
thinking), but only after importing LangChain, LangGraph and the store, about a second of
CPU. So the request goes out at once, from a thread and with the standard library alone, and
`models.show` takes its answer. A prefetch that fails is forgotten: `models.show` then asks
itself and reports a failure as it always does.
"""

import json
import threading
import urllib.request
from concurrent.futures import Future
from typing import Any

_SHOWS: dict[tuple[str, str], Future] = {}


def start_show(host: str, model: str, timeout: float) -> None:
    """Send /api/show for `model` in the background; `take_show` collects the answer."""
    future: Future = Future()
    _SHOWS[(host, model)] = future

    def run() -> None:
        request = urllib.request.Request(
            f"{host.rstrip('/')}/api/show",
            data=json.dumps({"model": model}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                future.set_result(json.loads(response.read()))
        except Exception as exc:  # any failure: models.show asks again and explains it
            future.set_exception(exc)

    threading.Thread(target=run, name="prefetch-show", daemon=True).start()


def take_show(host: str, model: str) -> dict[str, Any] | None:
    """Return the prefetched /api/show answer for `model` (once), or None if there is none."""
    future = _SHOWS.pop((host, model), None)
    if future is None or future.exception() is not None:
        return None
    return future.result()
