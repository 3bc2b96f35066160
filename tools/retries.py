"""The one retry loop: a request sent again while it fails in a way that may pass."""

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def with_retries(
    send: Callable[[], T],
    may_retry: Callable[[BaseException], bool],
    *,
    attempts: int = 4,
    backoff: float = 1.0,
    max_backoff: float | None = None,
    on_retry: Callable[[BaseException, int, float, int], None] | None = None,
) -> T:
    """Return `send()`, calling it again while it raises what `may_retry` accepts, up to
    `attempts` calls in all, waiting `backoff` seconds, then twice as long each time (at most
    `max_backoff`); `on_retry(error, attempt, wait, attempts)` hears of each retry before its
    wait. The last failure is raised as it came."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return send()
        except Exception as exc:
            if attempt >= attempts or not may_retry(exc):
                raise
            wait = backoff * 2 ** (attempt - 1)
            if max_backoff is not None:
                wait = min(wait, max_backoff)
            if on_retry is not None:
                on_retry(exc, attempt, wait, attempts)
            time.sleep(wait)
