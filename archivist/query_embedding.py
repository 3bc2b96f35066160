"""A store's query embedding for `archivist search`, without the LangChain stack.

`search` needs one vector: LangChain's Ollama embeddings would import LangChain, the ollama
client and their pydantic models, most of a second of CPU, to send one request. This sends the
model factory's request itself (`StrictOllamaEmbeddings`: `/api/embed` with `truncate: false`
and the task prefix) through httpx, and fails as the ollama client does (`ConnectionError`
when Ollama is down, `ollama.ResponseError` for an error answer), so `models.explain` words
the failures the same.
"""

from dataclasses import dataclass

import httpx
import orjson

from archivist.settings import Settings


@dataclass
class QueryEmbedder:
    """One embedding model's query vectors, with its query prefix."""

    settings: Settings
    model: str
    document_prefix: str
    query_prefix: str

    def embed_query(self, text: str) -> list[float]:
        body = {"model": self.model, "input": [self.query_prefix + text], "truncate": False}
        host = self.settings.ollama_host.rstrip("/")
        # Over http there is no TLS: no certificate store to load (~0.1 s of CPU).
        verify = host.startswith("https:")
        try:
            response = httpx.post(
                f"{host}/api/embed",
                content=orjson.dumps(body),
                headers={"Content-Type": "application/json", "Accept": "application/json"},
                timeout=self.settings.timeout,
                follow_redirects=True,
                verify=verify,
            )
        except httpx.ConnectError:
            raise ConnectionError(f"Failed to connect to Ollama at {host}.") from None
        if response.is_error:
            import ollama

            raise ollama.ResponseError(response.text, response.status_code)
        vectors = orjson.loads(response.content).get("embeddings")
        if not isinstance(vectors, list) or len(vectors) != 1:
            import ollama

            raise ollama.ResponseError(
                f"/api/embed answered {len(vectors or [])} embeddings for 1 input",
                response.status_code,
            )
        return vectors[0]


def query_embedder(settings: Settings, model: str, prefixes: tuple[str, str]) -> QueryEmbedder:
    """The query side of embedding model `model` with its (document, query) `prefixes`."""
    return QueryEmbedder(settings, model, *prefixes)
