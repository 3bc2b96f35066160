"""Embedding models with task prefixes, and the index fingerprint they imply."""

from collections.abc import Sequence

from langchain_core.embeddings import Embeddings

from archivist.tools.prefixes import TASK_PREFIXES, default_prefixes

__all__ = ["TASK_PREFIXES", "PrefixedEmbeddings", "default_prefixes"]


class PrefixedEmbeddings(Embeddings):
    """Wrap an embedding model so documents and queries get their task prefixes."""

    def __init__(
        self, inner: Embeddings, model: str, document_prefix: str = "", query_prefix: str = ""
    ) -> None:
        self.inner = inner
        self.model = model
        self.document_prefix = document_prefix
        self.query_prefix = query_prefix

    @classmethod
    def for_model(cls, inner: Embeddings, model: str) -> "PrefixedEmbeddings":
        """Wrap `inner` with the prefixes `model` was trained with."""
        document_prefix, query_prefix = default_prefixes(model)
        return cls(inner, model, document_prefix, query_prefix)

    def with_inner(self, inner: Embeddings) -> "PrefixedEmbeddings":
        """The same model and prefixes, its requests made by `inner`."""
        return type(self)(inner, self.model, self.document_prefix, self.query_prefix)

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed_documents([self.document_prefix + t for t in texts])

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(self.query_prefix + text)

    def fingerprint(self, dimension: int) -> dict:
        """Describe this embedder as the index fingerprint stored with a collection."""
        return {
            "embed_model": self.model,
            "dimension": dimension,
            "document_prefix": self.document_prefix,
            "query_prefix": self.query_prefix,
        }
