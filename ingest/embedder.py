"""Embed chunks in batches, a few requests at a time, retrying what a busy server may fix."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

# httpx is imported where a request failed: the ingest request's settings (`EmbedSettings`)
# are read by commands that send none (`sources`, an unchanged `sync`).
if TYPE_CHECKING:
    from concurrent.futures import Future

    from langchain_core.embeddings import Embeddings

    from archivist.tools.progress import ProgressFn


@dataclass(frozen=True)
class EmbedSettings:
    """How chunks are sent to the embedding model."""

    batch_size: int = 64
    """Chunks per embedding request."""
    concurrency: int = 4
    """Requests in flight at once. Ollama serves OLLAMA_NUM_PARALLEL of them at a time (1 to
    4 by default) and queues the others, so with more in flight than it serves, the next one
    is already waiting whenever one finishes."""
    attempts: int = 4
    """Tries per request before the ingest stops, for server errors and dropped connections
    (not timeouts: a request is already given all of ARCHIVIST_TIMEOUT)."""
    backoff: float = 1.0
    """Seconds before the first retry; each later wait doubles, up to `max_backoff`."""
    max_backoff: float = 16.0


class HeldVectors(Protocol):
    """Vectors on hand before their request is sent: an ingest's first chunks, embedded ahead
    of its graph (`archivist.ingest.ahead.EmbedAhead`)."""

    def answered(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The vectors of documents `texts` if every one is on hand, each given once; else
        None, and nothing is taken."""
        ...


def is_transient(exc: BaseException) -> bool:
    """Whether a failure may pass if tried again: 5xx and 429 answers, dropped connections.
    Not a timeout: the request already took as long as the user allows, and each retry
    would take that long again."""
    import httpx

    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and status > 0:
        return status >= 500 or status == 429
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return False
    return isinstance(exc, ConnectionError | httpx.TransportError)


def is_rejected(exc: BaseException) -> bool:
    """Whether the server refused this request's input (a 4xx answer other than 429)."""
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and 400 <= status < 500 and status != 429


def embed_with_retry(
    embeddings: Embeddings,
    texts: list[str],
    settings: EmbedSettings,
    on_retry: ProgressFn | None = None,
) -> list[list[float]]:
    """Embed texts, retrying transient failures with exponential backoff (each retry reported
    to `on_retry` as a `Retried` event); re-raise the last failure."""
    from archivist.tools.progress import Retried
    from archivist.tools.retries import with_retries

    def report(exc: BaseException, attempt: int, wait: float, attempts: int) -> None:
        if on_retry is not None:
            on_retry(Retried(str(exc), attempt, wait))

    return with_retries(
        lambda: embeddings.embed_documents(texts),
        is_transient,
        attempts=settings.attempts,
        backoff=settings.backoff,
        max_backoff=settings.max_backoff,
        on_retry=report,
    )


class EmbedQueue:
    """Embedding requests kept in flight for one ingest, across the graph's steps.

    Requests run `concurrency` at a time in worker threads, in the order submitted; results
    are taken in that order too, so what is stored does not depend on timing. Taking results
    can leave `keep` requests running: the model keeps working while the next files are read.

    At most `READY_PER_WORKER` requests per worker are handed to the threads at once (running,
    or answered and not yet taken); the rest wait as texts. An answer is ~50 times the size of
    its texts (768 floats a chunk), so a large record file whose chunks are all queued at
    once would otherwise hold every vector in memory until the store catches up. A request
    whose vectors are on hand (`held`: sent ahead of the graph) takes no thread and does not
    count: it is done as it is queued.
    """

    READY_PER_WORKER = 4

    def __init__(
        self,
        embeddings: Embeddings,
        settings: EmbedSettings,
        on_retry: ProgressFn | None = None,
        held: HeldVectors | None = None,
    ) -> None:
        from concurrent.futures import ThreadPoolExecutor  # an ingest's, not a listing's

        self.embeddings, self.settings, self.on_retry = embeddings, settings, on_retry
        self._pool = ThreadPoolExecutor(
            max_workers=max(1, settings.concurrency), thread_name_prefix="embed"
        )
        self._jobs: deque[tuple[Any, Future, bool]] = deque()
        """Requests started, in order: key, future, and whether a thread has it."""
        self._waiting: deque[tuple[Any, list[str]]] = deque()
        self._ready = self.READY_PER_WORKER * max(1, settings.concurrency)
        self._handed = 0
        """Requests among `_jobs` handed to the threads (not answered ahead)."""
        self._held = held

    def submit(self, key: Any, texts: list[str]) -> None:
        """Queue one request; its result comes back with `key`."""
        self._waiting.append((key, texts))
        self._start()

    def _start(self) -> None:
        from concurrent.futures import Future

        while self._waiting:
            key, texts = self._waiting[0]
            vectors = self._held.answered(texts) if self._held is not None else None
            handed = vectors is None
            if not handed:
                future: Future = Future()
                future.set_result(vectors)
            elif self._handed < self._ready:
                future = self._pool.submit(
                    embed_with_retry, self.embeddings, texts, self.settings, self.on_retry
                )
                self._handed += 1
            else:
                return
            self._waiting.popleft()
            self._jobs.append((key, future, handed))

    def __len__(self) -> int:
        return len(self._jobs) + len(self._waiting)

    def results(self, keep: int = 0) -> Iterator[tuple[Any, list[list[float]] | BaseException]]:
        """Yield (key, vectors) in submission order, or (key, error) for input the server
        refused: every request already answered, then more, waiting, until at most `keep`
        are left (requests answered ahead not counted). Any other failure (after its
        retries) is raised; `close` then stops the requests not yet started, so the caller
        can stop cleanly."""
        while self._jobs and (self._handed + len(self._waiting) > keep or self._jobs[0][1].done()):
            key, future, handed = self._jobs.popleft()
            self._handed -= handed
            self._start()
            error = future.exception()
            if error is None:
                yield key, future.result()
            elif is_rejected(error):
                yield key, error
            else:
                raise error

    def close(self) -> None:
        """Stop: requests not started are cancelled, those in flight are not waited for."""
        self._jobs.clear()
        self._waiting.clear()
        self._handed = 0
        self._pool.shutdown(wait=False, cancel_futures=True)
