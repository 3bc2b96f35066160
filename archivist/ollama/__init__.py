"""The one seam between Archivist and Ollama.

`Ollama` is everything Archivist asks of it — what a model is and can do (`show`, a
prefetched answer taken once), vectors (`embedder`, `embeddings`, `query_embedder`), chat
models, relevance scoring, pulls, the server's release — over one `Wire` (the requests
themselves, each written in one place: `archivist.ollama.wire`), which sends them on one
transport with one deadline and one retry loop (`archivist.ollama.transport`).

Importing this package loads no client library: `search` and an unchanged `ingest` send their
requests on the transport's socket, and LangChain (`archivist.ollama.chat`, the one module
that imports `langchain_ollama`) is imported when a chat model is built.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from archivist.ollama import wire as _wire
from archivist.ollama.embeddings import OllamaEmbedder, QueryEmbedder, declare
from archivist.ollama.transport import UnreadableAnswer, status_of
from archivist.tools.errors import ArchivistError

# concurrent.futures loads logging (~5 ms): only a command that asks ahead needs it.
if TYPE_CHECKING:
    from concurrent.futures import Future

    from archivist.agent.records import ModelInfo
    from archivist.agent.rerank import Scorer
    from archivist.settings import Settings
    from archivist.tools.embedding import PrefixedEmbeddings

__all__ = ["Ollama", "UnreadableAnswer", "context_of"]

OLLAMA_DEFAULT_NUM_CTX = 2048
"""The context window Ollama gives a model whose Modelfile sets no num_ctx."""

_SHOWS: dict[tuple[str, str], tuple[Future, float]] = {}
"""/api/show answers asked for ahead (`Ollama.show_soon`), by (address, model), with the
time by which each must be whole."""


class Ollama:
    """The Ollama the settings name, as Archivist uses it. No request is made until a method
    needs one."""

    def __init__(self, settings: Settings, wire: _wire.Wire | None = None) -> None:
        self.settings = settings
        self.wire = wire if wire is not None else _wire.connect(settings)

    # -- what a model is -----------------------------------------------------------------

    def show_soon(self, model: str) -> None:
        """Send /api/show for `model` now, from a thread, while the command's imports load;
        the next `show` of it takes the answer. A prefetch that fails is forgotten: `show`
        then asks itself and reports the failure as it always does."""
        _SHOWS[(self.wire.host, model)] = self._started(model)

    def _started(self, model: str) -> tuple[Future, float]:
        from concurrent.futures import Future

        future: Future = Future()

        def run() -> None:
            try:
                future.set_result(self.wire.show(model))
            except Exception as exc:  # noqa: BLE001 - `show` asks again and explains it
                future.set_exception(exc)

        threading.Thread(target=run, name="prefetch-show", daemon=True).start()
        return future, time.monotonic() + self.settings.timeout

    def _answer(self, model: str) -> dict[str, Any]:
        """/api/show's answer for `model`: the prefetched one (once) if it came, else asked."""
        prefetched = _SHOWS.pop((self.wire.host, model), None)
        if prefetched is not None:
            try:
                return _awaited(*prefetched)
            except TimeoutError:
                raise
            except Exception:  # noqa: BLE001 - asked again below, which says why
                pass
        return self.wire.show(model)

    def show(self, model: str) -> ModelInfo:
        """What Ollama says of a model: its capabilities and sizes."""
        from archivist.agent.records import ModelInfo

        capabilities, info, _ = _read_show(self._answer(model))
        context = next((v for k, v in info.items() if k.endswith(".context_length")), None)
        dimension = declare(self.wire.host, model, capabilities, info)
        return ModelInfo(model, tuple(capabilities), context, dimension)

    def missing(self, names: Sequence[str]) -> list[str] | None:
        """Return the models Ollama answers 404 for, or None if Ollama cannot be asked.

        A prefetched answer is looked at, not taken: `show` still finds it."""
        absent = []
        for name in dict.fromkeys(names):
            prefetched = _SHOWS.get((self.wire.host, name)) or self._started(name)
            try:
                _awaited(*prefetched)
            except Exception as exc:  # noqa: BLE001 - down or slow: the command says what to do
                if status_of(exc) != 404:
                    return None
                absent.append(name)
        return absent

    def embed_context(self, model: str | None = None, allow_chat: bool = False) -> int:
        """Return how many tokens the embedding model reads per input as Ollama runs it: its
        trained context, capped by the Modelfile's num_ctx (Ollama's default when unset).

        A model Ollama does not list as an embedding model is refused unless `allow_chat`: a
        chat model answers /api/embed too, with vectors that retrieve poorly, and a store built
        with it must be rebuilt to change model.
        """
        name = model or self.settings.embed_model
        capabilities, info, parameters = _read_show(self.wire.show(name))
        if capabilities and "embedding" not in capabilities and not allow_chat:
            raise ArchivistError(
                f"'{name}' is not an embedding model (Ollama lists it as: "
                f"{', '.join(capabilities)}).",
                "Use an embedding model: --embed-model nomic-embed-text (or set "
                "ARCHIVIST_EMBED_MODEL; ollama pull nomic-embed-text), or pass "
                "--allow-chat-embedder to embed with it anyway.",
            )
        declare(self.wire.host, name, capabilities, info)
        return context_of(info, parameters)

    # -- vectors -------------------------------------------------------------------------

    def embedder(self, model: str | None = None) -> OllamaEmbedder:
        """An embedding model's vectors for texts as given (no prefixes, no LangChain)."""
        return OllamaEmbedder(self.wire, model or self.settings.embed_model)

    def embeddings(
        self, model: str | None = None, prefixes: tuple[str, str] | None = None
    ) -> PrefixedEmbeddings:
        """The embedding model as LangChain's `Embeddings`, with the (document, query) task
        prefixes given, else those it was trained with."""
        from archivist.tools.embedding import PrefixedEmbeddings

        inner = self.embedder(model)
        if prefixes is None:
            return PrefixedEmbeddings.for_model(inner, inner.model)
        return PrefixedEmbeddings(inner, inner.model, *prefixes)

    def query_embedder(self, model: str, prefixes: tuple[str, str]) -> QueryEmbedder:
        """The query side of embedding model `model` with its (document, query) `prefixes`:
        one request's worth, without LangChain."""
        return QueryEmbedder(self.embedder(model), model, *prefixes)

    # -- chat ----------------------------------------------------------------------------

    def chat_model(self, model: str | None = None, **options: Any) -> Any:
        """Build a LangChain chat model (no request is made until it is used)."""
        return self.wire.chat_model(model or self.settings.chat_model, **options)

    def structured(
        self, model: str, schema: dict, seed: int | None = None
    ) -> Callable[[str, str], object]:
        """Build a function that sends (system, request) with `schema` as Ollama's `format`
        and returns the reply's JSON (raising ValueError when the reply is not JSON)."""
        import orjson

        chat = self.chat_model(model, temperature=0, seed=seed, format=schema)

        def ask(system: str, request: str) -> object:
            reply = chat.invoke([("system", system), ("human", request)])
            return orjson.loads(reply.content if isinstance(reply.content, str) else "")

        return ask

    def relevance_scorer(self, model: str) -> Scorer:
        """Build the function scoring a passage's relevance to a query with `model`
        (`archivist.ollama.scoring`)."""
        from archivist.ollama.scoring import relevance_scorer

        return relevance_scorer(self, model)

    # -- the server ----------------------------------------------------------------------

    def version(self) -> str:
        """Return the Ollama server's version (raises if it cannot be reached)."""
        return self.wire.version()

    def pull(self, model: str, on_progress: Callable[[str, int, int], None]) -> None:
        """Pull a model through /api/pull, reporting (status, completed, total) as it goes."""
        import pydantic

        try:
            for update in self.wire.pull(model):
                on_progress(update.status or "", update.completed or 0, update.total or 0)
        except pydantic.ValidationError:
            raise UnreadableAnswer("/api/pull", "not what Ollama answers") from None


def _awaited(future: Future, deadline: float) -> dict[str, Any]:
    """A prefetched answer, once it came whole; TimeoutError when the deadline passes first
    (the thread reading it is left to end on its own: it holds nothing)."""
    from concurrent.futures import TimeoutError as FutureTimeout

    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except FutureTimeout:
        raise TimeoutError("Ollama did not answer /api/show in time") from None


def _read_show(answer: dict[str, Any]) -> tuple[list[str], dict[str, Any], str]:
    """The capabilities, model_info and parameters of a /api/show answer, checked."""
    capabilities = answer.get("capabilities") or []
    info = answer.get("model_info") or {}
    parameters = answer.get("parameters") or ""
    if not (
        isinstance(capabilities, list)
        and all(isinstance(c, str) for c in capabilities)
        and isinstance(info, dict)
        and isinstance(parameters, str)
    ):
        raise UnreadableAnswer("/api/show", "not what Ollama answers")
    return capabilities, info, parameters


def context_of(model_info: dict, parameters: str) -> int:
    """How many tokens a model reads per input as Ollama runs it: its trained context, capped
    by the Modelfile's num_ctx (Ollama's default when unset)."""
    trained = next((v for k, v in model_info.items() if k.endswith(".context_length")), None)
    if trained is not None and not isinstance(trained, int):
        raise UnreadableAnswer("/api/show", "not what Ollama answers")
    match = re.search(r"^num_ctx\s+(\d+)", parameters or "", re.M)
    num_ctx = int(match.group(1)) if match else OLLAMA_DEFAULT_NUM_CTX
    return min(trained, num_ctx) if trained else num_ctx
