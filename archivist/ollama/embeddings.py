"""An embedding model's vectors, as every part of Archivist asks for them: an ingest's
documents, a search's query, the first files embedded ahead of an ingest's graph.

No LangChain here: `archivist search` needs one vector, and LangChain with the ollama client
and their pydantic models cost most of a second of CPU to import. `Ollama.embeddings` wraps
an `OllamaEmbedder` in LangChain's interface with its task prefixes for those who want it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from archivist.ollama.transport import UnreadableAnswer, with_retries
from archivist.ollama.wire import Wire
from archivist.tools.errors import ArchivistError

DECLARED: dict[tuple[str, str], int] = {}
"""Each embedding model's vector length as /api/show declared it, by (address, model)."""


def bare(model: str) -> str:
    return model.removesuffix(":latest")


def declare(host: str, model: str, capabilities: Sequence[str], info: dict) -> int | None:
    """Note an embedding model's declared vector length (which its answers are held to)."""
    dimension = next((v for k, v in info.items() if k.endswith(".embedding_length")), None)
    if isinstance(dimension, int) and "embedding" in capabilities:
        DECLARED[host, bare(model)] = dimension
    return dimension


@dataclass(frozen=True, eq=False)
class OllamaEmbedder:
    """One embedding model's vectors for texts as given (prefixes are the caller's).

    What is checked of every answer: one vector per input, all numbers, all finite, all of
    one length — the model's declared length once `show` has read it. A query is sent again
    while it fails in a way that may pass (`with_retries`); documents are retried by the
    ingest, which reports each retry as progress.
    """

    wire: Wire
    model: str

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        vectors = self.wire.embed(self.model, texts)
        self.check_vectors(vectors)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return with_retries(lambda: self.embed_documents([text])[0])

    def check_vectors(self, vectors: list[Any]) -> None:
        """Refuse vectors that are not lists of finite numbers of one (the declared) length."""
        try:
            # sum() runs in C and fails on anything but numbers; NaN and infinity stay so.
            finite = vectors == [] or math.isfinite(sum(map(sum, vectors)))
        except TypeError:
            finite = False
        if not finite:
            raise UnreadableAnswer("/api/embed", "vectors that are not all finite numbers")
        lengths = set(map(len, vectors))
        declared = DECLARED.get((self.wire.host, bare(self.model)))
        if len(lengths) > 1 or (declared and lengths and lengths != {declared}):
            from archivist.settings import mask_url

            sizes = ", ".join(map(str, sorted(lengths)))
            said = f", but Ollama lists it as {declared}-dimensional" if declared else ""
            raise ArchivistError(
                f"The embedding model '{self.model}' answered vectors of {sizes} dimensions"
                f"{said}: what runs under that name is not the model it declares.",
                f"Pull it again (`ollama pull {self.model}`), or check the model Ollama at "
                f"{mask_url(self.wire.host)} serves under that name; nothing was stored.",
            )


@dataclass(frozen=True)
class QueryEmbedder:
    """The query side of an embedding model, with its task prefixes."""

    inner: OllamaEmbedder
    model: str
    document_prefix: str
    query_prefix: str

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(self.query_prefix + text)
