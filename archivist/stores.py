"""The stores of one home or server: opened and checked, listed, and copied for another
embedding model (the embedder comparison)."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from archivist.settings import Settings
from archivist.tools.errors import ArchivistError, StoreDamaged
from archivist.tools.prefixes import default_prefixes, language_notice
from archivist.tools.store import (
    Chunk,
    KnowledgeStore,
    fingerprints_match,
    finish_swaps,
    list_stores,
    sparse_hint,
    tool_name,
)

if TYPE_CHECKING:
    from archivist.tools.embedding import PrefixedEmbeddings


def store_embedder(settings: Settings, store: KnowledgeStore) -> tuple[str, str, str]:
    """The embedding model a store was built with and its (document, query) prefixes, from
    its fingerprint (the configured model for a store that names none)."""
    built = store.fingerprint
    name = built.get("embed_model") or settings.embed_model
    default = default_prefixes(name)
    return name, built.get("document_prefix", default[0]), built.get("query_prefix", default[1])


def embeddings_for(
    settings: Settings, configured: PrefixedEmbeddings, store: KnowledgeStore
) -> PrefixedEmbeddings:
    """The embedding model a store was built with, with its prefixes: its queries are
    embedded as its chunks were, whatever model is configured (`configured`) for new stores."""
    from archivist.ollama import Ollama

    name, *prefixes = store_embedder(settings, store)
    if (name, *prefixes) == (
        configured.model,
        configured.document_prefix,
        configured.query_prefix,
    ):
        return configured
    return Ollama(settings).embeddings(name, (prefixes[0], prefixes[1]))


def open_store(client, settings: Settings, name: str, must_exist: bool) -> KnowledgeStore:
    """Return the named store, a swap left midway finished; with `must_exist`, it must exist
    and be readable by this release (no embedding model is built for the check)."""
    store = KnowledgeStore(client, name, settings.server_layout)
    store.finish_swap()
    if must_exist:
        # A missing store is refused here, with the stores named most like it.
        model, document_prefix, query_prefix = store_embedder(settings, store)
        store.check(
            {
                "embed_model": model,
                "dimension": store.fingerprint.get("dimension"),
                "document_prefix": document_prefix,
                "query_prefix": query_prefix,
            }
        )
    return store


def describe_stores(client, only: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """List the stores (or those of `only`) with their size, embedding model, sparse scheme
    and description; a damaged store with what is wrong with it and its fix."""
    listing = []
    finish_swaps(client)
    for name in list_stores(client):
        if only is not None and name not in only:
            continue
        store = KnowledgeStore(client, name)
        try:
            info = store.info()
            entry = {"chunks": store.count(), "fingerprint": info.get("fingerprint", {})}
        except StoreDamaged as exc:  # listed as damaged: the other stores stay usable
            listing.append(
                {
                    "store": name,
                    "tool": tool_name(name),
                    "chunks": None,
                    "embed_model": None,
                    "sparse": None,
                    "description": "",
                    "damaged": exc.what,
                    "fix": exc.fix,
                }
            )
            continue
        texts = store.sample_texts()  # a look at its language, for both notices
        listing.append(
            {
                "store": name,
                "tool": tool_name(name),
                "chunks": entry["chunks"],
                "embed_model": entry["fingerprint"].get("embed_model"),
                "sparse": entry["fingerprint"].get("sparse"),
                "description": info.get("description", ""),
                "embedding_notice": store_language_notice(store, texts),
                "sparse_notice": sparse_hint(name, entry["fingerprint"].get("sparse"), texts),
            }
        )
    return listing


def store_language_notice(store: KnowledgeStore, texts: Sequence[str] | None = None) -> str | None:
    """Say so when most of a store's text is in a language its embedding model does not
    read (from `texts`, a sample of its chunks, read here when not given), naming models that
    do; None when it reads it."""
    model = store.fingerprint.get("embed_model")
    if not model:
        return None
    return language_notice(store.name, model, store.sample_texts() if texts is None else texts)


def embedder_store(
    settings: Settings, base: KnowledgeStore, embed_model: str, batch: int = 64
) -> dict[str, Any]:
    """Make `base`'s passages searchable with `embed_model`: the store itself when it was
    built with that model, else a copy of its chunks embedded by it, `STORE__MODEL`, kept
    and reused while its chunks and the model's fingerprint are the same. Return what was
    used: the store, whether it was reused, the seconds its build took, its size, and
    whether the model is a chat model (which embeds poorly) rather than an embedder."""
    from archivist.failures import explained
    from archivist.ollama import Ollama

    ollama = Ollama(settings)
    with explained(settings):
        info = ollama.show(embed_model)
        embedder = ollama.embeddings(embed_model)
        dimension = len(embedder.embed_query("dimension"))
    # The copy keeps the store's sparse scheme, so embedders are compared on equal terms.
    fingerprint = {**embedder.fingerprint(dimension), "sparse": base.sparse_scheme}
    payloads = list(base.payloads())
    ids = sorted(Chunk(p["text"], p["source"], p["chunk_index"]).id for p in payloads)
    built_from = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]
    about = {
        "embed_model": embed_model,
        "chat_model": "embedding" not in info.capabilities,
        "dimension": dimension,
        "chunks": len(payloads),
    }
    if fingerprints_match(base.fingerprint, fingerprint):
        target, reused = base, True
    else:
        slug = re.sub(r"[^A-Za-z0-9]+", "_", embed_model).strip("_")
        name = f"{base.name}__{slug}"[:63]
        target = KnowledgeStore(base.client, name, settings.server_layout)
        if target.exists() and not {"copy_of", "built_from"} & target.info().keys():
            # Not a copy this comparison made: someone's own store, which a rebuild would empty.
            raise ArchivistError(
                f"A store named '{name}' already exists and was not made by "
                f"`eval --embed-model`; comparing {embed_model} on '{base.name}' would "
                "overwrite it.",
                f"Rename or delete that store (archivist delete {name}), or compare on "
                "another store.",
            )
        reused = (
            target.exists()
            and fingerprints_match(target.fingerprint, fingerprint)
            and target.info().get("built_from") == built_from
            and target.count() == len(payloads)
        )
        if not reused:
            with explained(settings, doing=f"Embedding {base.name} with {embed_model}"):
                _copy_chunks(base, target, embedder, fingerprint, payloads, batch)
            target.annotate(built_from=built_from)
    return {
        **about,
        "store": target.name,
        "reused": reused,
        "ingest_s": target.info().get("built_s"),
        "disk_bytes": target.disk_bytes(),
    }


def _copy_chunks(
    base: KnowledgeStore,
    target: KnowledgeStore,
    embedder: PrefixedEmbeddings,
    fingerprint: dict[str, Any],
    payloads: list[dict[str, Any]],
    batch: int,
) -> None:
    """Write `payloads` into `target` (emptied first), embedded by `embedder` and stored as
    an ingest stores them (`store_documents`), timed."""
    from archivist.ingest.embedder import EmbedSettings
    from archivist.ingest.graph import PendingDoc, store_documents

    started = time.perf_counter()
    if target.exists():
        target.drop()
    target.ensure(fingerprint, base.description)
    target.annotate(copy_of=base.name)  # marked at once: an interrupted copy is ours too
    docs: dict[str, PendingDoc] = {}
    for p in sorted(payloads, key=lambda p: (p["source"], p["chunk_index"])):
        doc = docs.get(p["source"])
        if doc is None:
            doc = docs[p["source"]] = PendingDoc(
                p["source"], p["doc_hash"], [], "new", p["ingested_at"]
            )
        doc.chunks.append(Chunk(p["text"], p["source"], p["chunk_index"], p.get("metadata", {})))
    store_documents(target, embedder, list(docs.values()), EmbedSettings(batch_size=batch))
    target.annotate(built_s=round(time.perf_counter() - started, 3))
