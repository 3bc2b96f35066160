"""Embed chunks in batches, a few requests at a time, retrying what a busy server may fix."""

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import httpx
from langchain_core.embeddings import Embeddings
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_exponential


@dataclass(frozen=True)
class EmbedSettings:
    """How chunks are sent to the embedding model."""

    batch_size: int = 32
    """Chunks per embedding request."""
    concurrency: int = 2
    """Requests in flight at once (Ollama serves OLLAMA_NUM_PARALLEL at a time, often 2)."""
    attempts: int = 4
    """Tries per request before the ingest stops, for server errors, timeouts and drops."""
    backoff: float = 1.0
    """Seconds before the first retry; each later wait doubles, up to `max_backoff`."""
    max_backoff: float = 16.0


def is_transient(exc: BaseException) -> bool:
    """Whether a failure may pass if tried again: 5xx and 429 answers, timeouts, drops."""
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status > 0:
        return status >= 500 or status == 429
    return isinstance(exc, TimeoutError | ConnectionError | httpx.TransportError)


def is_rejected(exc: BaseException) -> bool:
    """Whether the server refused this request's input (a 4xx answer other than 429)."""
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status != 429


RetryFn = Callable[[BaseException, int, float], None]


def embed_with_retry(
    embeddings: Embeddings,
    texts: list[str],
    settings: EmbedSettings,
    on_retry: RetryFn | None = None,
) -> list[list[float]]:
    """Embed texts, retrying transient failures with exponential backoff; re-raise the last."""

    def before_sleep(state: RetryCallState) -> None:
        if on_retry and state.outcome is not None:
            wait_s = state.next_action.sleep if state.next_action else 0.0
            on_retry(state.outcome.exception(), state.attempt_number, wait_s)

    retrying = Retrying(
        stop=stop_after_attempt(settings.attempts),
        wait=wait_exponential(multiplier=settings.backoff, max=settings.max_backoff),
        retry=retry_if_exception(is_transient),
        before_sleep=before_sleep,
        reraise=True,
    )
    return retrying(embeddings.embed_documents, texts)


def embed_jobs(
    embeddings: Embeddings,
    jobs: Sequence[tuple[Any, list[str]]],
    settings: EmbedSettings,
    on_retry: RetryFn | None = None,
) -> Iterator[tuple[Any, list[list[float]] | BaseException]]:
    """Embed each job's texts with at most `concurrency` requests in flight, yielding
    (job key, vectors) as requests finish, or (job key, error) for input the server refused.

    Any other failure (after its retries) cancels the jobs not yet started and is raised, so
    the caller can stop cleanly; the caller stores each result as it arrives.
    """
    pool = ThreadPoolExecutor(max_workers=max(1, settings.concurrency), thread_name_prefix="embed")
    queue = list(reversed(jobs))
    running: dict[Future, Any] = {}
    try:
        while queue or running:
            while queue and len(running) < max(1, settings.concurrency):
                key, texts = queue.pop()
                running[pool.submit(embed_with_retry, embeddings, texts, settings, on_retry)] = key
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            # Finish in submission order among those done, so results are deterministic.
            for future in sorted(done, key=lambda f: list(running).index(f)):
                key = running.pop(future)
                error = future.exception()
                if error is None:
                    yield key, future.result()
                elif is_rejected(error):
                    yield key, error
                else:
                    raise error
    finally:
        # On an error or Ctrl-C, do not wait for requests still in flight.
        pool.shutdown(wait=False, cancel_futures=True)
