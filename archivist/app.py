"""The application: stores, models and graphs wired from the settings, one call per command."""

import hashlib
import math
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from archivist import models
from archivist.agent.records import EventFn, Passage, Turn
from archivist.agent.retrieval import make_retrieval_tool, search_alone, tool_name
from archivist.agent.setup import AgentSetup, StoreTool, build_setup
from archivist.settings import Settings, mask_url
from archivist.tools.embedding import PrefixedEmbeddings, default_prefixes
from archivist.tools.engine import writing as engine_writing
from archivist.tools.errors import ArchivistError, ModelMissing
from archivist.tools.store import (
    Chunk,
    KnowledgeStore,
    SearchMode,
    connect,
    fingerprints_match,
    finish_swaps,
    list_stores,
)
from archivist.turnlog import TurnLog, logged_turn

if TYPE_CHECKING:
    from archivist.agent.langchain import StoreRetriever
    from archivist.ingest.embedder import EmbedSettings
    from archivist.tools.progress import ProgressFn


class Archivist:
    """One user's Archivist: its stores, its models, its agent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def client(self):
        """The Qdrant client behind every store (opened on first use)."""
        return connect(
            self.settings.store_path,
            self.settings.qdrant_url,
            self.settings.qdrant_api_key,
            prefer_grpc=self.settings.qdrant_grpc,
            timeout=self.settings.qdrant_timeout,
            legacy_path=self.settings.legacy_store_path,
            wait=self.settings.store_wait,
        )

    def writing(self) -> AbstractContextManager[None]:
        """Be the embedded store's one writer through the block (another writer waits, saying
        for whom); a Qdrant server takes many writers."""
        return engine_writing(self.client)

    @cached_property
    def embeddings(self):
        """The embedding model, with its task prefixes."""
        return models.embeddings(self.settings)

    def close(self) -> None:
        """Release the store (the embedded store is locked while open)."""
        if "client" in self.__dict__:
            self.client.close()
            del self.__dict__["client"]

    def embeddings_for(self, store: KnowledgeStore) -> PrefixedEmbeddings:
        """The embedding model a store was built with, with its prefixes: its queries are
        embedded as its chunks were, whatever model is configured for new stores."""
        built = store.fingerprint
        name = built.get("embed_model") or self.settings.embed_model
        default = default_prefixes(name)
        prefixes = (built.get("document_prefix", default[0]), built.get("query_prefix", default[1]))
        configured = self.embeddings
        if (name, *prefixes) == (
            configured.model,
            configured.document_prefix,
            configured.query_prefix,
        ):
            return configured
        return models.embeddings(self.settings, name, prefixes)

    @contextmanager
    def released_on_failure(self, doing: str = "", then: str = "") -> Iterator[None]:
        """Explain an Ollama or Qdrant failure in the block; if the block opened the store,
        release it again when it fails.

        A notebook's kernel outlives a failed cell: a call that fails on its first use of the
        store must not leave it locked against the other notebooks and the command line. A
        store opened before stays open: the caller may hold stores and agents that use it.
        """
        opened_before = "client" in self.__dict__
        try:
            with models.explained(self.settings, doing, then):
                yield
        except BaseException:
            if not opened_before:
                self.close()
            raise

    def store(self, name: str, must_exist: bool = True) -> KnowledgeStore:
        """Return the named store; by default it must exist and be readable by this release."""
        store = KnowledgeStore(self.client, name, self.settings.server_layout)
        store.finish_swap()
        if must_exist:
            store.check(self.embeddings_for(store).fingerprint(store.fingerprint.get("dimension")))
        return store

    def delete_source(self, store: str, source: str) -> int:
        """Remove one source's chunks from a store; return how many there were."""
        with self.writing():
            return self.store(store).delete_source(source)

    def stores(self) -> list[dict[str, Any]]:
        """List the stores with their size, embedding model, sparse scheme and description."""
        listing = []
        finish_swaps(self.client)
        for name in list_stores(self.client):
            store = KnowledgeStore(self.client, name)
            info = store.info()
            listing.append(
                {
                    "store": name,
                    "tool": tool_name(name),
                    "chunks": store.count(),
                    "embed_model": info.get("fingerprint", {}).get("embed_model"),
                    "sparse": info.get("fingerprint", {}).get("sparse"),
                    "description": info.get("description", ""),
                }
            )
        return listing

    def ingest(
        self,
        paths: Sequence[str],
        store: str,
        prune: bool = False,
        description: str | None = None,
        on_progress: "ProgressFn | None" = None,
        *,
        reindex: bool = False,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        text_field: str | None = None,
        id_field: str | None = None,
        embed: "EmbedSettings | None" = None,
        shard: str | None = None,
        text_extensions: Sequence[str] = (),
        loaders: Sequence[str] = (),
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        allow_chat_embedder: bool = False,
    ) -> dict[str, Any]:
        """Bring a store in sync with files and folders; return the ingest report.

        With `reindex`, a store built with another embedding model is rebuilt and swapped in
        when done; with `shard` ("i/N"), only that part of the sources is ingested (and
        pruned). `text_extensions` are read as plain text (`.py`); `loaders` name LangChain
        document loaders for file patterns (`*.xml=module:Class`); `include`/`exclude` are
        globs on paths inside the folders (gitignore syntax). A chat model is refused as the
        embedder unless `allow_chat_embedder`. The decisions are the write path's
        (`archivist.ingest.pipeline`).
        """
        from archivist.ingest.pipeline import ingest_options, plan_ingest

        missing = [p for p in paths if not os.path.lexists(p)]
        if missing and len(missing) == len(paths):
            raise ArchivistError(
                f"Nothing to ingest: {', '.join(map(str, missing))} does not exist.",
                "Check the path (relative paths start from the current folder); the store was "
                "not created.",
            )
        options = ingest_options(
            prune=prune,
            description=description,
            reindex=reindex,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            batch_size=batch_size,
            concurrency=concurrency,
            text_field=text_field,
            id_field=id_field,
            embed=embed,
            shard=shard,
            text_extensions=text_extensions,
            loaders=loaders,
            include=include,
            exclude=exclude,
        )
        with self.released_on_failure():
            context = models.embed_context(self.settings, allow_chat=allow_chat_embedder)
        # One writer at a time; searches get through between its writes.
        with self.writing():
            target = self.store(store, must_exist=False)
            job = plan_ingest(target, self.embeddings, options, context)
            with self.released_on_failure(doing="Ingest stopped", then=job.kept):
                report = job.run(list(paths), on_progress)
            return job.finish(report)

    def search(
        self,
        query: str,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
        min_score: float | None = None,
        mmr: float | None = None,
    ) -> list[Passage]:
        """Run the retrieval tool alone and return its results."""
        with self.released_on_failure():
            opened = self.store(store)
            tool = self.retrieval_tool(opened, k, mode, min_score, mmr)
            try:
                return search_alone(tool, query, source)
            except ArchivistError:
                raise
            except Exception as exc:
                error = self.query_error(opened, exc)
                if error is exc:
                    raise
                raise error from None

    def query_error(self, store: KnowledgeStore, exc: Exception) -> Exception:
        """Word an expected failure of a query to `store` with its fix (else return `exc`).

        A missing embedding model is named as the store's own: its queries need that model,
        whichever is configured for new stores.
        """
        error = models.explain(exc, self.settings)
        if error is None:
            return exc
        embedder = self.embeddings_for(store)
        if not isinstance(error, ModelMissing) or error.model != embedder.model:
            return error
        fix = f"Pull it with `ollama pull {embedder.model}`: a store is searched with the model "
        fix += "that embedded its chunks."
        if embedder.model != self.settings.embed_model:
            fix += (
                f" Or rebuild the store with {self.settings.embed_model}: "
                f"archivist ingest PATH --store {store.name} --reindex"
            )
        return ModelMissing(
            f"Store '{store.name}' was built with the embedding model '{embedder.model}', which "
            f"Ollama at {mask_url(self.settings.ollama_host)} does not have.",
            fix,
            embedder.model,
        )

    def embedder_store(self, store: str, embed_model: str, batch: int = 64) -> dict[str, Any]:
        """Make `store`'s passages searchable with `embed_model`: the store itself when it was
        built with that model, else a copy of its chunks embedded by it, `STORE__MODEL`, kept
        and reused while its chunks and the model's fingerprint are the same. Return what was
        used: the store, whether it was reused, the seconds its build took, its size, and
        whether the model is a chat model (which embeds poorly) rather than an embedder."""
        base = self.store(store)
        with models.explained(self.settings):
            info = models.show(self.settings, embed_model)
            embedder = models.embeddings(self.settings, embed_model)
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
            name = f"{store}__{slug}"[:63]
            target = KnowledgeStore(self.client, name, self.settings.server_layout)
            if target.exists() and not {"copy_of", "built_from"} & target.info().keys():
                # Not a copy this comparison made: someone's own store, which a rebuild
                # would empty.
                raise ArchivistError(
                    f"A store named '{name}' already exists and was not made by "
                    f"`eval --embed-model`; comparing {embed_model} on '{store}' would "
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
                with models.explained(self.settings, doing=f"Embedding {store} with {embed_model}"):
                    self._embed_copy(base, target, embedder, fingerprint, payloads, batch)
                target.annotate(built_from=built_from)
        return {
            **about,
            "store": target.name,
            "reused": reused,
            "ingest_s": target.info().get("built_s"),
            "disk_bytes": target.disk_bytes(),
        }

    @staticmethod
    def _embed_copy(base, target, embedder, fingerprint, payloads, batch: int) -> None:
        """Write `payloads` into `target` (emptied first), embedded by `embedder`, timed."""
        started = time.perf_counter()
        if target.exists():
            target.drop()
        target.ensure(fingerprint, base.description)
        target.annotate(copy_of=base.name)  # marked at once: an interrupted copy is ours too
        for start in range(0, len(payloads), batch):
            part = payloads[start : start + batch]
            chunks = [
                Chunk(p["text"], p["source"], p["chunk_index"], p.get("metadata", {})) for p in part
            ]
            target.upsert(
                chunks,
                embedder.embed_documents([c.text for c in chunks]),
                [p["doc_hash"] for p in part],
                [p["doc_chunks"] for p in part],
                part[0]["ingested_at"] if part else None,
            )
        target.annotate(built_s=round(time.perf_counter() - started, 3))

    @cached_property
    def turn_log(self) -> TurnLog:
        """The log of every turn answered by `ask` and `chat`."""
        return TurnLog(self.settings.log_path)

    def retrieval_tool(
        self,
        store: KnowledgeStore,
        k: int | None = None,
        mode: SearchMode | None = None,
        min_score: float | None = None,
        mmr: float | None = None,
    ):
        """Build a store's retrieval tool with the settings, overridden by any values given."""
        if min_score is not None and not math.isfinite(min_score):
            raise ArchivistError(
                f"--min-score {min_score} is not a score.", "Give a finite number, like 0.3."
            )
        s = self.settings
        return make_retrieval_tool(
            store,
            self.embeddings_for(store),
            k or s.k,
            mode or s.search_mode,
            s.min_score if min_score is None else min_score,
            s.mmr if mmr is None else mmr,
        )

    def _store_tool(self, name: str) -> StoreTool:
        store = self.store(name)
        about = store.description or f"documents in the {name} store"
        return StoreTool(self.retrieval_tool(store), about)

    def agent(
        self,
        stores: Sequence[str],
        model: str | None = None,
        *,
        checkpointer=None,
        think: bool | None = None,
        seed: int | None = None,
        grade: bool | None = None,
    ) -> AgentSetup:
        """Build the agent for `stores` in the model's best mode, sized to its context.

        The model runs at temperature 0; `seed` fixes its sampling where the model honours it.
        `grade` (default: the setting) grades each search's passages with the same model.
        """
        if not stores:
            raise ArchivistError("No store given.", "Name one with --store NAME.")
        s = self.settings
        with models.explained(s):
            tools = [self._store_tool(name) for name in stores]
            info = models.show(s, model or s.chat_model)
        return build_setup(
            info,
            stores,
            tools,
            partial(models.chat_model, s, info.name, temperature=0, seed=seed),
            num_ctx=s.num_ctx,
            max_steps=s.max_steps,
            max_rewrites=s.max_rewrites,
            checkpointer=checkpointer,
            think=think,
            grade=s.grade if grade is None else grade,
            retrieve_first=s.retrieve_first,
        )

    def ask(
        self,
        question: str,
        stores: Sequence[str],
        model: str | None = None,
        think: bool | None = None,
        grade: bool | None = None,
        on_event: EventFn | None = None,
    ) -> Turn:
        """Answer one question in a fresh conversation, log it; return the `ask --json` object.

        `on_event` hears the turn as it runs, as `run_turn` describes."""
        if not question.strip():
            raise ArchivistError(
                "The question is empty.", 'Ask something: archivist ask "How do refunds work?"'
            )
        with self.released_on_failure():
            setup = self.agent(stores, model, think=think, grade=grade)
            return logged_turn(self.turn_log, "ask", setup, question, on_event=on_event)

    def retriever(
        self,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
    ) -> "StoreRetriever":
        """Return a store as a LangChain retriever: the passages as Documents, best first."""
        from archivist.agent.langchain import StoreRetriever

        return StoreRetriever(tool=self.retrieval_tool(self.store(store), k, mode), source=source)

    def tool(self, store: str, k: int | None = None, mode: SearchMode | None = None):
        """Return a store's `search_<store>` tool, as Archivist's agent has it, for any
        LangChain or LangGraph agent (`create_agent` included)."""
        return self.retrieval_tool(self.store(store), k, mode)
