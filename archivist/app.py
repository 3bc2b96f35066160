"""The application: stores, models and graphs wired from the settings, one call per command."""

from __future__ import annotations

import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace
from functools import cached_property, partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archivist import failures, stores
from archivist.agent.records import Turn
from archivist.home import ensure_home
from archivist.settings import Settings
from archivist.tools.engine import exit_follows
from archivist.tools.engine import writing as engine_writing
from archivist.tools.errors import ArchivistError, StoreDamaged
from archivist.tools.search import SearchMode, SearchRequest
from archivist.tools.store import KnowledgeStore, connect, list_stores, missing_store

# A command imports what it uses when it uses it: listing stores needs neither LangChain nor
# a client library of Ollama's (docs/performance.md, "Start-up").
if TYPE_CHECKING:
    from archivist.agent.langchain import StoreRetriever
    from archivist.agent.rerank import Reranker
    from archivist.agent.retrieval import QueryEmbeddings, SearchResult
    from archivist.agent.setup import AgentSetup, StoreTool
    from archivist.ingest.pipeline import EmbeddingModel
    from archivist.ingest.report import IngestReport
    from archivist.ingest.request import IngestRequest
    from archivist.ingest.roots import Root
    from archivist.ingest.status import RootStatus
    from archivist.ollama import Ollama
    from archivist.tools.embedding import PrefixedEmbeddings
    from archivist.tools.progress import ProgressFn
    from archivist.turnlog import TurnLog


def closing_for_exit(exiting: bool) -> AbstractContextManager[Any]:
    """Through a block, Archivists closed belong to a process that ends right after them
    (the `archivist` command, `exiting`): the stores they only read are left to the exit,
    their pages cached for the next command (`tools.engine.exit_follows`)."""
    return exit_follows() if exiting else nullcontext()


class Archivist:
    """One user's Archivist: its stores, its models, its agent."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._rerankers: dict[str, Reranker] = {}

    @cached_property
    def _client(self):
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
            layout=self.settings.store_layout,
        )

    def writing(self) -> AbstractContextManager[None]:
        """Be the embedded store's one writer through the block (another writer waits, saying
        for whom); a Qdrant server takes many writers."""
        return engine_writing(self._client)

    @cached_property
    def ollama(self) -> Ollama:
        """The Ollama the settings name: models, embeddings, what they can do."""
        from archivist.ollama import Ollama

        return Ollama(self.settings)

    @cached_property
    def embeddings(self):
        """The embedding model, with its task prefixes."""
        return self.ollama.embeddings()

    def close(self) -> None:
        """Release the store (the embedded store is locked while open)."""
        if "_client" in self.__dict__:
            self._client.close()
            del self.__dict__["_client"]

    def embeddings_for(self, store: KnowledgeStore) -> PrefixedEmbeddings:
        """The embedding model a store was built with, with its prefixes: its queries are
        embedded as its chunks were, whatever model is configured for new stores."""
        return stores.embeddings_for(self.settings, self.embeddings, store)

    def released_on_failure(self, doing: str = "", then: str = "") -> AbstractContextManager:
        """Explain an Ollama or Qdrant failure in the block; if the block opened the store,
        release it again when it fails (`failures.released_on_failure`)."""
        opened_before = "_client" in self.__dict__
        release = None if opened_before else self.close
        return failures.released_on_failure(self.settings, release, doing, then)

    def store(self, name: str, must_exist: bool = True) -> KnowledgeStore:
        """Return the named store; by default it must exist and be readable by this release."""
        return stores.open_store(self._client, self.settings, name, must_exist)

    def store_names(self) -> list[str]:
        """The names of the stores there are."""
        return list_stores(self._client)

    def store_size(self, store: str) -> int | None:
        """How many chunks a store holds, None for a damaged one (it can still be deleted);
        StoreNotFound when there is no store by that name."""
        target = self.store(store, must_exist=False)
        if not target.exists():
            raise missing_store(self._client, store, "List the stores with: archivist stores")
        try:
            return target.count()
        except StoreDamaged:
            return None

    def delete_store(self, store: str) -> int | None:
        """Delete a whole store; return the chunks it held (None: it was damaged)."""
        with self.writing():
            # Counted once writing: an ingest waited for may have stored more.
            removed = self.store_size(store)
            self.store(store, must_exist=False).drop()
        return removed

    def delete_source(self, store: str, source: str) -> dict[str, Any]:
        """Remove one source's chunks from a store (named as `sources` lists it, or by its
        file name); return its name and how many chunks there were."""
        with self.writing():
            opened = self.store(store)
            name = opened.find_source(source)
            removed = opened.delete_source(name) if name is not None else 0
        if not removed:
            raise ArchivistError(
                f"Store '{store}' has no source '{source}'.",
                f"List its sources with: archivist sources --store {store}",
            )
        return {"source": name, "chunks": removed}

    def find_root(self, store: str, root: str) -> Root | None:
        """The root of a store named by its label, its location or a path (None: no such
        root)."""
        from archivist.ingest.roots import RootSet

        return RootSet.of(self.store(store).info()).find(root)

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
        return IngestRequest.from_recorded(root, store, prune=True, prune_blank=prune)

    def stores(self, only: Sequence[str] | None = None) -> list[dict[str, Any]]:
        """List the stores (or those of `only`) with their size, embedding model, sparse
        scheme and description; a damaged one with what is wrong and its fix instead."""
        return stores.describe_stores(self._client, only)

    def source_status(self, store: str) -> list[RootStatus]:
        """Every source of a store, by root, with its status against the disk (ok, changed,
        deleted, new, failed, unknown: `archivist.ingest.status`)."""
        from archivist.ingest.status import store_status

        opened = self.store(store)
        with self.released_on_failure():
            return store_status(opened)

    def copy_stores(
        self,
        *,
        to_url: str | None = None,
        to_home: Path | None = None,
        from_url: str | None = None,
        from_home: Path | None = None,
        api_key: str | None = None,
        from_api_key: str | None = None,
        stores: Sequence[str] = (),
        force: bool = False,
        batch: int = 256,
        grpc: bool = False,
        on_progress: ProgressFn | None = None,
    ) -> dict[str, Any]:
        """Copy stores, their vectors as they are, from this home (or `from_home`, or the
        server at `from_url`) to the server at `to_url` or the embedded store of `to_home`;
        return where from, where to, and each store copied (`tools.migrate.copy_stores`)."""
        from grpc import RpcError
        from qdrant_client.http.exceptions import ApiException

        from archivist.settings import mask_url
        from archivist.tools.engine import writing
        from archivist.tools.migrate import copy_stores, stores_to_copy

        settings = self.settings
        if (to_url is None) == (to_home is None):
            raise ArchivistError(
                "Say where to copy to.", "Give one of --to-url URL or --to-home PATH."
            )
        if from_url and from_home:
            raise ArchivistError(
                "Say where to copy from.", "Give --from-home or --from-url, not both."
            )
        source_home = None if from_url else (from_home or settings.home).expanduser()
        if to_home and source_home and to_home.expanduser().resolve() == source_home.resolve():
            raise ArchivistError("The source and the target are the same home.", "Choose another.")
        if to_url and from_url and to_url.rstrip("/") == from_url.rstrip("/"):
            raise ArchivistError(
                "The source and the target are the same server.", "Choose another."
            )
        origin = mask_url(from_url) if from_url else str(source_home)
        destination = mask_url(to_url) if to_url else str(to_home)
        wait = settings.store_wait
        source = target = None
        try:
            if source_home is not None:
                source_settings = settings.with_overrides(home=source_home)
                if not (
                    source_settings.store_path.is_dir()
                    or source_settings.legacy_store_path.is_dir()
                ):
                    raise ArchivistError(
                        f"There is no embedded store in {source_home}.",
                        "Give the folder ARCHIVIST_HOME pointed at (it holds an `edge` folder).",
                    )
                source = connect(
                    source_settings.store_path,
                    legacy_path=source_settings.legacy_store_path,
                    wait=wait,
                )
            else:
                source = connect(url=from_url, api_key=from_api_key, prefer_grpc=grpc, timeout=60)
            # A store missing from the source is refused before the target is opened, so a
            # target home that did not exist is not left behind holding only a lock.
            stores = stores_to_copy(source, stores)
            if to_home is not None:
                target = connect(
                    settings.with_overrides(home=to_home.expanduser()).store_path, wait=wait
                )
                layout = None
            else:
                key = api_key or settings.qdrant_api_key
                target = connect(url=to_url, api_key=key, prefer_grpc=grpc, timeout=60)
                layout = settings.with_overrides(qdrant_url=to_url).server_layout
            with writing(target):
                copied = copy_stores(source, target, stores, layout, batch, force, on_progress)
        except (ApiException, RpcError, OSError) as exc:
            raise ArchivistError(
                f"Cannot copy from {origin} to {destination}: {exc}",
                "Check that the Qdrant server runs at that address (its /readyz answers) and "
                "the API key (--api-key, QDRANT_API_KEY).",
            ) from None
        finally:
            for client in (source, target):
                if client is not None:
                    client.close()
        return {"from": origin, "to": destination, "stores": copied}

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
        from archivist.ingest.pipeline import IngestPlan
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
        with self.released_on_failure():
            model = self._embedding_model(request)
            with self.writing():
                store = self.store(request.store, must_exist=False)
                plan = IngestPlan.decide(request, store, model, on_progress)
        if plan.unchanged is not None:
            if release:
                self.close()
            return replace(plan.unchanged, seconds=round(time.perf_counter() - started, 2))
        ahead = plan.embed_ahead()
        try:
            embeddings = self.embeddings
            # One writer at a time; searches get through between its writes.
            with self.writing():
                job = plan.job(self.store(request.store, must_exist=False), embeddings)
                with self.released_on_failure(doing="Ingest stopped", then=job.kept):
                    outcome = job.run(on_progress, ahead)
                points = job.finish()
        finally:
            if ahead is not None:
                ahead.close()
        if release:
            self.close()
        return job.report(outcome, points, time.perf_counter() - started)

    def _embedding_model(self, request: IngestRequest) -> EmbeddingModel:
        """The embedding model an ingest embeds with: the configured one (whose context one
        /api/show request tells; no LangChain imported), or embeddings set on this object."""
        from archivist.ingest.pipeline import EmbeddingModel
        from archivist.tools.prefixes import default_prefixes

        context = self.ollama.embed_context(allow_chat=request.allow_chat_embedder)
        if "embeddings" in self.__dict__:
            own = self.embeddings
            return EmbeddingModel(own.model, own.document_prefix, own.query_prefix, context)
        model = self.settings.embed_model
        prefixes = default_prefixes(model)
        return EmbeddingModel(model, *prefixes, context, self.ollama.embedder(model))

    def search_request(self, request: SearchRequest | None = None, **options: Any) -> SearchRequest:
        """A search's options: `request`'s, else the settings' (`k`, `search_mode`,
        `min_score`, `mmr`, `rerank_model`, `rerank_candidates`), changed by `options` (any
        `SearchRequest` field; None keeps the setting, `rerank=False` turns reranking off).

        Every search of the application takes its options from here: the one place their
        defaults are decided."""
        if request is None:
            s = self.settings
            request = SearchRequest(
                k=s.k,
                mode=s.search_mode,  # type: ignore[arg-type] - the settings check it
                min_score=s.min_score,
                mmr=s.mmr,
                rerank=s.rerank_model or None,
                candidates=s.rerank_candidates,
            )
        return request.with_options(**options)

    def search(
        self,
        query: str,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
        *,
        request: SearchRequest | None = None,
        **options: Any,
    ) -> SearchResult:
        """Run a store's search alone; return its passages (the result is a sequence of
        them) and what was done to them.

        The options are the settings' (or `request`'s), changed by those given: `k`, `mode`,
        `source`, and any other `SearchRequest` field (`min_score`, `mmr`, `rerank=False`…).
        """
        from archivist.agent.retrieval import search_once

        asked = self.search_request(request, k=k, mode=mode, source=source, **options)
        with self.released_on_failure():
            opened = self.store(store)
            opened.expect_search()
            embedder = self.query_embeddings_for(opened)
            try:
                return search_once(opened, embedder, query, asked, self._reranker(asked))
            except ArchivistError:
                raise
            except Exception as exc:
                error = failures.query_error(self.settings, opened, embedder, exc)
                if error is exc:
                    raise
                raise error from None

    def query_embeddings_for(self, store: KnowledgeStore) -> QueryEmbeddings:
        """The query side of the embedding model a store was built with: LangChain's
        embeddings when they are built already, else one request's worth (no LangChain to
        import)."""
        if "embeddings" in self.__dict__:
            return self.embeddings_for(store)
        model, *prefixes = stores.store_embedder(self.settings, store)
        return self.ollama.query_embedder(model, (prefixes[0], prefixes[1]))

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

    @property
    def reranker(self) -> Reranker | None:
        """The reranker the settings name (`rerank_model`), checked once; None without one."""
        return self._reranker(self.search_request())

    def _reranker(self, request: SearchRequest) -> Reranker | None:
        """The reranker of the model a request names, built and checked once per model."""
        if not request.rerank:
            return None
        found = self._rerankers.get(request.rerank)
        if found is None:
            from archivist.agent.rerank import Reranker

            with failures.explained(self.settings):
                score = self.ollama.relevance_scorer(request.rerank)
            found = Reranker(score, request.rerank, self.settings.rerank_parallel)
            self._rerankers[request.rerank] = found
        return found

    def retrieval_tool(
        self, store: KnowledgeStore, request: SearchRequest | None = None, **options: Any
    ):
        """Build a store's retrieval tool with the settings' search options (or `request`'s),
        changed by any given (`search_request`).

        Every search of the application goes through it — the agent's tools,
        retrieve-then-answer, MCP, the LangChain retriever — or through `search_once` with
        the same request (`search`), so each is reranked when the settings name a rerank
        model (unless `rerank=False`)."""
        from archivist.agent.retrieval import make_retrieval_tool

        asked = self.search_request(request, **options)
        store.expect_search()
        return make_retrieval_tool(store, self.embeddings_for(store), asked, self._reranker(asked))

    def _store_tool(self, name: str, rerank: bool = True, tools: str | None = None) -> StoreTool:
        from archivist.agent.documents import checked_toolset, document_tools
        from archivist.agent.setup import StoreTool

        store = self.store(name)
        about = store.description or f"documents in the {name} store"
        more = document_tools(store) if checked_toolset(tools) == "all" else []
        tool = self.retrieval_tool(store, rerank=None if rerank else False)
        return StoreTool(tool, about, tuple(more))

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
        tools: str | None = None,
    ) -> AgentSetup:
        """Build the agent for `stores` in the model's best mode, sized to its context.

        The model runs at temperature 0; `seed` fixes its sampling where the model honours it.
        `grade` (default: the setting) grades each search's passages with the same model;
        `rerank` False leaves out the reranking the settings ask for; `tools` is the toolset
        each store gives the model, `search` (the default) or `all` (search, list and read).
        """
        from archivist.agent.setup import build_setup

        if not stores:
            raise ArchivistError("No store given.", "Name one with --store NAME.")
        s = self.settings
        with failures.explained(s):
            offered = [self._store_tool(name, rerank, tools or s.tools) for name in stores]
            info = self.ollama.show(model or s.chat_model)
        return build_setup(
            info,
            stores,
            offered,
            partial(self.ollama.chat_model, info.name, temperature=0, seed=seed),
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
        tools: str | None = None,
    ) -> Turn:
        """Answer one question in a fresh conversation, log it; return the `ask --json` object.

        `on_event` hears the turn as it runs, as `run_turn` describes; `tools` is the toolset
        (`search` or `all`)."""
        from archivist.turnlog import logged_turn

        if not question.strip():
            raise ArchivistError(
                "The question is empty.", 'Ask something: archivist ask "How do refunds work?"'
            )
        with self.released_on_failure():
            setup = self.agent(stores, model, think=think, grade=grade, tools=tools)
            turn = logged_turn(self.turn_log, "ask", setup, question, on_event=on_event)
        # What the chat says when it starts (a model without tools), `ask` says with its notes.
        return {**turn, "notes": [*setup.notices, *turn["notes"]]}

    def list_documents(
        self, store: str, contains: str | None = None, path: str | None = None
    ) -> list[dict[str, Any]]:
        """The store's sources whose name fits `path` and whose stored text holds `contains`
        (case ignored): every one, with exact counts and where the first occurrences are."""
        from archivist.agent.documents import DocumentError, list_documents, person_error

        with self.released_on_failure():
            opened = self.store(store)
            try:
                return [e.as_dict() for e in list_documents(opened, path, contains)]
            except DocumentError as exc:
                raise person_error(exc, store, "--path") from None

    def read_document(
        self,
        store: str,
        source: str,
        lines: str | None = None,
        page: str | None = None,
        heading: str | None = None,
    ) -> dict[str, Any]:
        """One source as stored, in order, or its part by lines, page (or sheet) or heading:
        its lines with their numbers (the file's, for text and Markdown) and pages."""
        from archivist.agent.documents import DocumentError, person_error, read_document

        with self.released_on_failure():
            opened = self.store(store)
            try:
                return read_document(opened, source, lines, page, heading).as_dict()
            except DocumentError as exc:
                raise person_error(exc, store, "SOURCE, --lines, --page or --heading") from None

    def retriever(
        self,
        store: str,
        k: int | None = None,
        mode: SearchMode | None = None,
        source: str | None = None,
        **options: Any,
    ) -> StoreRetriever:
        """Return a store as a LangChain retriever: the passages as Documents, best first.

        The search options are the settings', changed by those given (`k`, `mode`, `source`,
        any other `SearchRequest` field); a call may change them again for itself
        (`retriever.invoke(query, k=1)`)."""
        from archivist.agent.langchain import StoreRetriever

        tool = self.retrieval_tool(self.store(store), k=k, mode=mode, **options)
        return StoreRetriever(tool=tool, source=source)

    def document_tools(self, store: str) -> list:
        """Return a store's `list_<store>` and `read_<store>` tools, as Archivist's agent has
        them with `--tools all`, for any LangChain or LangGraph agent."""
        from archivist.agent.documents import document_tools

        return document_tools(self.store(store))

    def tool(
        self, store: str, k: int | None = None, mode: SearchMode | None = None, **options: Any
    ):
        """Return a store's `search_<store>` tool, as Archivist's agent has it, for any
        LangChain or LangGraph agent (`create_agent` included), its search options the
        settings' changed by those given."""
        return self.retrieval_tool(self.store(store), k=k, mode=mode, **options)
