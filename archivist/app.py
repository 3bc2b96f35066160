"""The application: stores, models and graphs wired from the settings, one call per command."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archivist import failures, stores
from archivist.agent.records import Passage, Turn
from archivist.home import ensure_home
from archivist.settings import Settings
from archivist.tools.engine import writing as engine_writing
from archivist.tools.errors import ArchivistError
from archivist.tools.store import (
    KnowledgeStore,
    SearchMode,
    connect,
)

# A command imports what it uses when it uses it: listing stores needs neither LangChain nor
# the model factory (docs/performance.md, "Start-up").
if TYPE_CHECKING:
    from archivist.agent.langchain import StoreRetriever
    from archivist.agent.rerank import Reranker
    from archivist.agent.retrieval import QueryEmbeddings
    from archivist.agent.setup import AgentSetup, StoreTool
    from archivist.ingest.report import IngestReport
    from archivist.ingest.request import IngestRequest
    from archivist.tools.embedding import PrefixedEmbeddings
    from archivist.tools.progress import ProgressFn
    from archivist.turnlog import TurnLog


class Archivist:
    """One user's Archivist: its stores, its models, its agent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    @cached_property
    def client(self):
        """The Qdrant client behind every store (opened on first use)."""
        if not self.settings.qdrant_url:
            ensure_home(self.settings.home)
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
        from archivist import models

        return models.embeddings(self.settings)

    def close(self) -> None:
        """Release the store (the embedded store is locked while open)."""
        if "client" in self.__dict__:
            self.client.close()
            del self.__dict__["client"]

    def embeddings_for(self, store: KnowledgeStore) -> PrefixedEmbeddings:
        """The embedding model a store was built with, with its prefixes: its queries are
        embedded as its chunks were, whatever model is configured for new stores."""
        return stores.embeddings_for(self.settings, self.embeddings, store)

    def released_on_failure(self, doing: str = "", then: str = "") -> AbstractContextManager:
        """Explain an Ollama or Qdrant failure in the block; if the block opened the store,
        release it again when it fails (`failures.released_on_failure`)."""
        opened_before = "client" in self.__dict__
        release = None if opened_before else self.close
        return failures.released_on_failure(self.settings, release, doing, then)

    def store(self, name: str, must_exist: bool = True) -> KnowledgeStore:
        """Return the named store; by default it must exist and be readable by this release."""
        return stores.open_store(self.client, self.settings, name, must_exist)

    def delete_source(self, store: str, source: str) -> int:
        """Remove one source's chunks from a store; return how many there were."""
        with self.writing():
            return self.store(store).delete_source(source)

    def delete_root(self, store: str, root: str) -> dict[str, Any]:
        """Remove one root of a store (named by its label, its location or a path) and all
        its sources; return what was removed: the root's location, chunks and renames."""
        from archivist.ingest.roots import RootSet, remove_root

        with self.writing():
            opened = self.store(store)
            roots = RootSet.of(opened.info())
            found = roots.find(root)
            if found is None:
                recorded = ", ".join(f"{r.label} ({r.location})" for r in roots.roots) or "none"
                raise ArchivistError(
                    f"Store '{store}' has no root '{root}'. Its roots: {recorded}.",
                    f"Name one by its label or path; archivist sources --store {store} lists them.",
                )
            chunks, renamed = remove_root(opened, found)
        return {"root": found.location, "label": found.label, "chunks": chunks, "renamed": renamed}

    def recorded_roots(self, stores: Sequence[str] = ()) -> list[tuple[str, Any]]:
        """(store, root) for every root the named stores record (all stores: none named)."""
        from archivist.ingest.roots import RootSet

        names = list(stores) or [s["store"] for s in self.stores()]
        return [
            (name, root) for name in names for root in RootSet.of(self.store(name).info()).roots
        ]

    def sync_request(self, store: str, root: Any, prune: bool = False) -> IngestRequest:
        """The ingest run that brings one recorded root of a store up to date: the root read
        again with its recorded options, its deleted files removed (with `prune`, even when
        the root now lists nothing, or its site's pages all answer 404)."""
        from archivist.ingest.request import IngestRequest
        from archivist.ingest.roots import request_arguments

        path = Path(root.location)
        if root.kind != "url" and not path.exists():
            raise ArchivistError(
                f"{root.location} ({root.label}, a root of '{store}') is missing: its sources "
                "are kept.",
                f"Bring it back, or remove it: archivist delete --store {store} --root "
                f"{root.label}",
            )
        if root.kind in ("folder", "file") and path.is_dir() != (root.kind == "folder"):
            now = "a folder" if path.is_dir() else "a file"
            raise ArchivistError(
                f"{root.location} ({root.label}, a root of '{store}') was a {root.kind} and is "
                f"now {now}: its sources are kept.",
                f"Put the {root.kind} back, or remove the root: archivist delete --store "
                f"{store} --root {root.label}",
            )
        return IngestRequest.build(
            [root.location], store, prune=True, prune_blank=prune, **request_arguments(root)
        )

    def stores(self, only: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """List the stores (or those of `only`) with their size, embedding model, sparse
        scheme and description; a damaged one with what is wrong and its fix instead."""
        return stores.describe_stores(self.client, only)

    def ingest(
        self,
        request: IngestRequest | Sequence[str],
        store: str | None = None,
        *,
        on_progress: ProgressFn | None = None,
        release: bool = False,
        **options: Any,
    ) -> IngestReport:
        """Bring a store in sync with files and folders; return the ingest report.

        Give an `IngestRequest`, or the paths, the store and its options, which
        `IngestRequest.build` checks (`reindex`, `shard`, `chunk_size`, `include`, …). With
        `release`, the store is released when the run is done (the embedded store indexes
        what was written as it closes), within the report's `seconds`. The decisions are
        the write path's (`archivist.ingest.pipeline`).
        """
        from archivist.ingest.request import IngestRequest

        started = time.perf_counter()
        if not isinstance(request, IngestRequest):
            if store is None:
                raise TypeError("ingest(paths, store, ...) needs the store's name")
            request = IngestRequest.build(request, store, **options)
        elif store is not None or options:
            raise TypeError("ingest(request) takes its options from the request")
        if request.urls and request.web.cache is None:
            request = replace(request, web=replace(request.web, cache=str(self.settings.web_cache)))
        if request.load_timeout is None and self.settings.load_timeout is not None:
            request = replace(request, load_timeout=self.settings.load_timeout)
        unchanged, new_store_context = self._unchanged(request, on_progress)
        if unchanged is not None:
            if release:
                self.close()
            return replace(unchanged, seconds=round(time.perf_counter() - started, 2))
        ahead = None
        if new_store_context is not None and "embeddings" not in self.__dict__:
            # Only the model factory's embeddings: the caller's own may be asked only by them.
            from archivist.ingest.ahead import EmbedAhead
            from archivist.tools.prefixes import default_prefixes

            model = self.settings.embed_model
            prefix = default_prefixes(model)[0]
            ahead = EmbedAhead.start(self.settings, request, model, prefix, new_store_context)
        try:
            return self._run_ingest(request, ahead, on_progress, release, started)
        finally:
            if ahead is not None:
                ahead.close()

    def _run_ingest(
        self,
        request: IngestRequest,
        ahead: Any,
        on_progress: ProgressFn | None,
        release: bool,
        started: float,
    ) -> IngestReport:
        """Plan and run the ingest graph (the first files' vectors taken from `ahead`)."""
        from archivist import models
        from archivist.ingest.pipeline import plan_ingest

        with self.released_on_failure():
            context = models.embed_context(self.settings, allow_chat=request.allow_chat_embedder)
        embeddings = self.embeddings
        if ahead is not None:
            from archivist.ingest.ahead import AheadEmbeddings

            embeddings = embeddings.with_inner(AheadEmbeddings(embeddings.inner, ahead))
        # One writer at a time; searches get through between its writes.
        with self.writing():
            target = self.store(request.store, must_exist=False)
            job = plan_ingest(request, target, embeddings, context)
            with self.released_on_failure(doing="Ingest stopped", then=job.kept):
                outcome = job.run(on_progress)
            points = job.finish()
        if release:
            self.close()
        return job.report(outcome, points, time.perf_counter() - started)

    def _unchanged(
        self, request: IngestRequest, on_progress: ProgressFn | None
    ) -> tuple[Any, int | None]:
        """The report of an ingest that would change nothing, told from what the store
        recorded and one /api/show request, without the ingest graph or the model factory
        (`archivist.ingest.unchanged`); None when there is something to do, or any doubt.
        With it, when the run fills a store that does not exist yet, the embedding model's
        context (tokens) the answer gave, else None."""
        from archivist import light_ollama
        from archivist.ingest.unchanged import unchanged_report
        from archivist.tools.prefixes import default_prefixes

        if request.urls or request.reindex or request.shard:
            return None, None
        if "embeddings" in self.__dict__:
            model = self.embeddings.model
            prefixes = (self.embeddings.document_prefix, self.embeddings.query_prefix)
        else:
            model = self.settings.embed_model
            prefixes = default_prefixes(model)
        answer = light_ollama.show(self.settings, model)
        if answer is None:
            return None, None  # the model factory's way says why
        capabilities = answer.get("capabilities") or []
        if capabilities and "embedding" not in capabilities and not request.allow_chat_embedder:
            return None, None
        context = light_ollama.context_of(
            answer.get("model_info") or {}, answer.get("parameters") or ""
        )
        wanted = {"embed_model": model, "document_prefix": prefixes[0], "query_prefix": prefixes[1]}
        with self.writing():
            try:
                store = self.store(request.store, must_exist=False)
                if store.exists():
                    return unchanged_report(request, store, context, wanted, on_progress), None
            except ArchivistError:
                return None, None  # a damaged or unreadable store: the graph's run says so
        return None, context

    def search(
        self,
        query: str,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
        min_score: float | None = None,
        mmr: float | None = None,
        rerank: bool = True,
    ) -> list[Passage]:
        """Run the retrieval tool alone and return its results: a `Reranked` list when the
        settings name a rerank model and `rerank` is not False."""
        from archivist.agent.retrieval import search_once

        s = self.settings
        with self.released_on_failure():
            opened = self.store(store)
            self._check_min_score(min_score)
            embedder = self.query_embeddings_for(opened)
            try:
                return search_once(
                    opened,
                    embedder,
                    query,
                    source,
                    k or s.k,
                    mode or s.search_mode,
                    s.min_score if min_score is None else min_score,
                    s.mmr if mmr is None else mmr,
                    self.reranker if rerank else None,
                )
            except ArchivistError:
                raise
            except Exception as exc:
                error = failures.query_error(self.settings, opened, embedder, exc)
                if error is exc:
                    raise
                raise error from None

    def query_embeddings_for(self, store: KnowledgeStore) -> QueryEmbeddings:
        """The query side of the embedding model a store was built with: the model factory's
        when it is built already, else one request's worth (no LangChain to import)."""
        if "embeddings" in self.__dict__:
            return self.embeddings_for(store)
        from archivist import query_embedding

        model, *prefixes = stores.store_embedder(self.settings, store)
        return query_embedding.query_embedder(self.settings, model, (prefixes[0], prefixes[1]))

    def query_error(self, store: KnowledgeStore, exc: Exception) -> Exception:
        """Word an expected failure of a query to `store` with its fix (else return `exc`)."""
        return failures.query_error(self.settings, store, self.embeddings_for(store), exc)

    def embedder_store(self, store: str, embed_model: str, batch: int = 64) -> dict[str, Any]:
        """Make `store`'s passages searchable with `embed_model`: the store itself, or a copy
        of its chunks embedded by it (`stores.embedder_store`); return what was used."""
        return stores.embedder_store(self.settings, self.store(store), embed_model, batch)

    @cached_property
    def turn_log(self) -> TurnLog:
        """The log of every turn answered by `ask` and `chat`."""
        from archivist.turnlog import TurnLog

        return TurnLog(self.settings.log_path)

    @cached_property
    def reranker(self) -> Reranker | None:
        """The reranker the settings name (`rerank_model`), checked once; None without one."""
        s = self.settings
        if not s.rerank_model:
            return None
        from archivist import models
        from archivist.agent.rerank import Reranker

        with models.explained(s):
            score = models.relevance_scorer(s, s.rerank_model)
        return Reranker(score, s.rerank_model, s.rerank_candidates, s.rerank_parallel)

    def retrieval_tool(
        self,
        store: KnowledgeStore,
        k: int | None = None,
        mode: SearchMode | None = None,
        min_score: float | None = None,
        mmr: float | None = None,
        rerank: bool = True,
    ):
        """Build a store's retrieval tool with the settings, overridden by any values given.

        Every search of the application goes through it — the agent's tools,
        retrieve-then-answer, MCP, the LangChain retriever — or through `search_once` with the
        same arguments (`search`), so each is reranked when the settings name a rerank model
        (unless `rerank` is False)."""
        from archivist.agent.retrieval import make_retrieval_tool

        self._check_min_score(min_score)
        s = self.settings
        return make_retrieval_tool(
            store,
            self.embeddings_for(store),
            k or s.k,
            mode or s.search_mode,
            s.min_score if min_score is None else min_score,
            s.mmr if mmr is None else mmr,
            self.reranker if rerank else None,
        )

    @staticmethod
    def _check_min_score(min_score: float | None) -> None:
        if min_score is not None and not math.isfinite(min_score):
            raise ArchivistError(
                f"--min-score {min_score} is not a score.", "Give a finite number, like 0.3."
            )

    def _store_tool(self, name: str, rerank: bool = True) -> StoreTool:
        from archivist.agent.setup import StoreTool

        store = self.store(name)
        about = store.description or f"documents in the {name} store"
        return StoreTool(self.retrieval_tool(store, rerank=rerank), about)

    def agent(
        self,
        stores: Sequence[str],
        model: str | None = None,
        *,
        checkpointer=None,
        think: bool | None = None,
        seed: int | None = None,
        grade: bool | None = None,
        rerank: bool = True,
    ) -> AgentSetup:
        """Build the agent for `stores` in the model's best mode, sized to its context.

        The model runs at temperature 0; `seed` fixes its sampling where the model honours it.
        `grade` (default: the setting) grades each search's passages with the same model;
        `rerank` False leaves out the reranking the settings ask for.
        """
        from archivist import models
        from archivist.agent.setup import build_setup

        if not stores:
            raise ArchivistError("No store given.", "Name one with --store NAME.")
        s = self.settings
        with models.explained(s):
            tools = [self._store_tool(name, rerank) for name in stores]
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
        on_event: ProgressFn | None = None,
    ) -> Turn:
        """Answer one question in a fresh conversation, log it; return the `ask --json` object.

        `on_event` hears the turn as it runs, as `run_turn` describes."""
        from archivist.turnlog import logged_turn

        if not question.strip():
            raise ArchivistError(
                "The question is empty.", 'Ask something: archivist ask "How do refunds work?"'
            )
        with self.released_on_failure():
            setup = self.agent(stores, model, think=think, grade=grade)
            turn = logged_turn(self.turn_log, "ask", setup, question, on_event=on_event)
        # What the chat says when it starts (a model without tools), `ask` says with its notes.
        return {**turn, "notes": [*setup.notices, *turn["notes"]]}

    def retriever(
        self,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
    ) -> StoreRetriever:
        """Return a store as a LangChain retriever: the passages as Documents, best first."""
        from archivist.agent.langchain import StoreRetriever

        return StoreRetriever(tool=self.retrieval_tool(self.store(store), k, mode), source=source)

    def tool(self, store: str, k: int | None = None, mode: SearchMode | None = None):
        """Return a store's `search_<store>` tool, as Archivist's agent has it, for any
        LangChain or LangGraph agent (`create_agent` included)."""
        return self.retrieval_tool(self.store(store), k, mode)
