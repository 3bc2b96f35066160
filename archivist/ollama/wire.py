"""The requests Archivist sends to Ollama, each written in one place, and how they travel.

`Wire` lists them: what a model is (`/api/show`), vectors (`/api/embed`), the server's
release (`/api/version`), one unstreamed chat answer (`/api/chat`, for scoring), a LangChain
chat model (its own `/api/chat` requests) and a pull (`/api/pull`). `HttpWire` sends them to a
running Ollama: the first three on the transport's socket (`archivist.ollama.transport`, no
client library to import), the others through the client libraries made with the same
deadline (`archivist.ollama.clients`). `connect` is what every use of Ollama starts from, so a
test hands in a fake by replacing it alone.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from archivist.ollama.transport import Endpoint, UnreadableAnswer

if TYPE_CHECKING:
    from archivist.settings import Settings


class Wire(Protocol):
    """The requests to Ollama. Each raises as the ollama client does: `ollama.ResponseError`
    for an error answer (its `status_code`), `ConnectionError` when Ollama is down (`Cut`
    when a connection breaks), `TimeoutError`, and `UnreadableAnswer` for what is not
    Ollama's API."""

    host: str
    """The address requests go to (what is learnt of a server is kept by it)."""

    def show(self, model: str) -> dict[str, Any]:
        """`/api/show`: the model's capabilities, `model_info` and `parameters`."""
        ...

    def embed(self, model: str, texts: Sequence[str]) -> list[Any]:
        """`/api/embed` of `texts` as given, `truncate: false`: the answer's `embeddings`."""
        ...

    def version(self) -> str:
        """`/api/version`: the server's release."""
        ...

    def chat(self, model: str, messages: list[dict[str, Any]], **options: Any) -> Any:
        """One unstreamed `/api/chat` answer (an `ollama.ChatResponse`)."""
        ...

    def chat_model(self, model: str, **options: Any) -> Any:
        """A LangChain chat model served by `model` (no request until it is used)."""
        ...

    def pull(self, model: str) -> Iterator[Any]:
        """`/api/pull`'s progress lines (`ollama.ProgressResponse`)."""
        ...


@dataclass(frozen=True, eq=False)
class HttpWire:
    """The requests sent to Ollama at `endpoint`. It holds no connection: it can be handed
    to another process (an ingest's first files embedded ahead of its graph)."""

    endpoint: Endpoint

    @property
    def host(self) -> str:
        return self.endpoint.address

    def show(self, model: str) -> dict[str, Any]:
        answer = self.endpoint.call("/api/show", {"model": model})
        if not isinstance(answer, dict):
            raise UnreadableAnswer("/api/show", "not what Ollama answers")
        return answer

    def embed(self, model: str, texts: Sequence[str]) -> list[Any]:
        # `truncate: false`: Ollama refuses an input longer than the model's context instead
        # of silently embedding only its beginning. Written and read with orjson: the ollama
        # client's pydantic models check each of an answer's floats one by one, which costs
        # more CPU than a fast embedder spends computing them.
        body = {"model": model, "input": list(texts), "truncate": False}
        answer = self.endpoint.call("/api/embed", body)
        vectors = answer.get("embeddings") if isinstance(answer, dict) else None
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            inputs = len(texts)
            raise UnreadableAnswer(
                "/api/embed",
                f"{len(vectors or [])} embeddings for {inputs} input{'s' * (inputs != 1)}",
            )
        return vectors

    def version(self) -> str:
        answer = self.endpoint.call("/api/version", seconds=min(5.0, self.endpoint.timeout))
        if not isinstance(answer, dict):
            raise UnreadableAnswer("/api/version", "not what Ollama answers")
        return str(answer.get("version", "?"))

    def chat(self, model: str, messages: list[dict[str, Any]], **options: Any) -> Any:
        from archivist.ollama.clients import client

        return client(self.endpoint).chat(model, messages=messages, stream=False, **options)

    def chat_model(self, model: str, **options: Any) -> Any:
        from archivist.ollama.chat import chat_model

        return chat_model(self.endpoint, model, **options)

    def pull(self, model: str) -> Iterator[Any]:
        from archivist.ollama.clients import client

        yield from client(self.endpoint).pull(model, stream=True)


def connect(settings: Settings) -> Wire:
    """The requests to the Ollama the settings name (OLLAMA_HOST, ARCHIVIST_TIMEOUT)."""
    return HttpWire(Endpoint.of(settings.ollama_host, settings.timeout))
