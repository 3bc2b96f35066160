"""Failures worded for the user: a query's missing model named as its store's own, and a
failed call that releases the store it opened."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from archivist.settings import Settings, mask_url
from archivist.tools.errors import ArchivistError, ModelMissing

if TYPE_CHECKING:
    from archivist.tools.embedding import PrefixedEmbeddings
    from archivist.tools.store import KnowledgeStore


def query_error(
    settings: Settings, store: KnowledgeStore, embedder: PrefixedEmbeddings, exc: Exception
) -> Exception:
    """Word an expected failure of a query to `store`, embedded by `embedder`, with its fix
    (else return `exc`).

    A missing embedding model is named as the store's own: its queries need that model,
    whichever is configured for new stores.
    """
    from archivist import models

    error = models.explain(exc, settings)
    if error is None:
        return exc
    if not isinstance(error, ModelMissing) or error.model != embedder.model:
        return error
    fix = f"Pull it with `ollama pull {embedder.model}`: a store is searched with the model "
    fix += "that embedded its chunks."
    if embedder.model != settings.embed_model:
        fix += (
            f" Or rebuild the store with {settings.embed_model}: "
            f"archivist ingest PATH --store {store.name} --reindex"
        )
    return ModelMissing(
        f"Store '{store.name}' was built with the embedding model '{embedder.model}', which "
        f"Ollama at {mask_url(settings.ollama_host)} does not have.",
        fix,
        embedder.model,
    )


@contextmanager
def released_on_failure(
    settings: Settings,
    release: Callable[[], None] | None,
    doing: str = "",
    then: str = "",
) -> Iterator[None]:
    """Explain an Ollama or Qdrant failure in the block; call `release` (if given) when the
    block fails.

    A notebook's kernel outlives a failed cell: a call that fails on its first use of the
    store must not leave it locked against the other notebooks and the command line. A
    store opened before stays open (no `release`): the caller may hold stores and agents
    that use it.
    """
    try:
        try:
            yield
        except Exception as exc:
            if isinstance(exc, ArchivistError):
                raise
            # The model factory (and its imports) only when there is a failure to word.
            from archivist import models

            with models.explained(settings, doing, then):
                raise
    except BaseException:
        if release is not None:
            release()
        raise
