"""A store's query embedding for `archivist search`, without the LangChain stack.

`search` needs one vector: LangChain's Ollama embeddings would import LangChain, the ollama
client and their pydantic models, most of a second of CPU, to send one request; even httpx
costs ~0.2 s to import (it loads its own command line's libraries). So this sends the model
factory's request itself (`StrictOllamaEmbeddings`: `/api/embed` with `truncate: false` and the
task prefix) with the standard library's HTTP client, as every client to Ollama is made: the
credentials of OLLAMA_HOST sent, the request ended within ARCHIVIST_TIMEOUT from its first byte
to its last (as archivist.deadline does for httpx), a busy Ollama or a cut connection tried
again as the model factory does (`models.CHAT_ATTEMPTS`, waiting 1, 2, 4 s). It fails as the
ollama client does (`ConnectionError` when Ollama is down, `TimeoutError`, httpx's `ReadError`
for a cut connection, `ollama.ResponseError` for an error answer, the model factory's
`UnreadableAnswer` for what is not Ollama's answer), so `models.explain` words the failures
the same.
"""

import math
import time
from dataclasses import dataclass

import orjson

from archivist.light_ollama import Cut, post
from archivist.settings import Settings, split_credentials

ATTEMPTS = 4
BACKOFF = 1.0


@dataclass
class QueryEmbedder:
    """One embedding model's query vectors, with its query prefix."""

    settings: Settings
    model: str
    document_prefix: str
    query_prefix: str

    def embed_query(self, text: str) -> list[float]:
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return send_embed(self.settings, self.model, [self.query_prefix + text])[0]
            except (_Busy, Cut) as exc:
                if attempt == ATTEMPTS:
                    if isinstance(exc, _Busy):
                        raise exc.error from None
                    import httpx

                    raise httpx.ReadError(str(exc)) from None
                time.sleep(BACKOFF * 2 ** (attempt - 1))
        raise AssertionError("unreachable")


def send_embed(settings: Settings, model: str, texts: list[str]) -> list[list[float]]:
    """Send one /api/embed request of `texts` (with their prefixes) to `model`, with the body
    the model factory's embeddings send, and return their vectors, checked as it checks them:
    one per input, all finite numbers. Raises as the ollama client does; `_Busy` and `Cut`
    for what may pass when sent again."""
    body = orjson.dumps({"model": model, "input": texts, "truncate": False})
    inputs = len(texts)
    host, credentials = split_credentials(settings.ollama_host.rstrip("/"))
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    status, content = post(f"{host}/api/embed", body, {**headers, **credentials}, settings.timeout)
    if status >= 400:
        import ollama

        # It reads the `error` of a JSON body itself, as from httpx.
        error = ollama.ResponseError(content.decode("utf-8", "replace"), status)
        if status >= 500 or status == 429:
            raise _Busy(error)
        raise error
    try:
        vectors = orjson.loads(content).get("embeddings")
    except (orjson.JSONDecodeError, AttributeError):
        _unreadable("an empty answer" if not content.strip() else "not JSON")
    if not isinstance(vectors, list) or len(vectors) != inputs:
        _unreadable(f"{len(vectors or [])} embeddings for {inputs} input{'s' * (inputs != 1)}")
    try:
        finite = math.isfinite(sum(map(sum, vectors)))
    except TypeError:
        finite = False
    if not finite:
        _unreadable("vectors that are not all finite numbers")
    return vectors


class _Busy(Exception):
    """Ollama answered 5xx or 429: the request may pass when sent again."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


def _unreadable(problem: str) -> None:
    from archivist.models import UnreadableAnswer

    raise UnreadableAnswer("/api/embed", problem)


def query_embedder(settings: Settings, model: str, prefixes: tuple[str, str]) -> QueryEmbedder:
    """The query side of embedding model `model` with its (document, query) `prefixes`."""
    return QueryEmbedder(settings, model, *prefixes)
