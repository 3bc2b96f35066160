"""The application: stores, models and graphs wired from the settings, one call per command."""

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from agent import models, prompts
from agent.citations import check_citations
from agent.graph import build_agent, build_retrieve_then_answer, turn_input
from agent.settings import Settings
from tools.errors import ArchivistError
from tools.retrieval import make_retrieval_tool, tool_name
from tools.store import (
    SPARSE_SCHEME,
    KnowledgeStore,
    SearchMode,
    connect,
    fingerprints_match,
    list_stores,
)

if TYPE_CHECKING:
    from ingest.embedder import EmbedSettings

AGENT = "agent"
RETRIEVE_THEN_ANSWER = "retrieve-then-answer"


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
        )

    @cached_property
    def embeddings(self):
        """The embedding model, with its task prefixes."""
        return models.embeddings(self.settings)

    def close(self) -> None:
        """Release the store (the embedded store is locked while open)."""
        if "client" in self.__dict__:
            self.client.close()
            del self.__dict__["client"]

    def store(self, name: str, must_exist: bool = True) -> KnowledgeStore:
        """Return the named store; by default it must exist and match the embedding model."""
        store = KnowledgeStore(self.client, name, self.settings.server_layout)
        if must_exist:
            store.check(self.embeddings.fingerprint(store.fingerprint.get("dimension")))
        return store

    def stores(self) -> list[dict[str, Any]]:
        """List the stores with their size, model and description."""
        listing = []
        for name in list_stores(self.client):
            store = KnowledgeStore(self.client, name)
            info = store.info()
            listing.append(
                {
                    "store": name,
                    "tool": tool_name(name),
                    "chunks": store.count(),
                    "embed_model": info.get("fingerprint", {}).get("embed_model"),
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
        on_progress: Callable[[str, dict[str, Any]], None] | None = None,
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
    ) -> dict[str, Any]:
        """Bring a store in sync with files and folders; return the ingest report.

        With `reindex`, a store built with another embedding model is rebuilt into a scratch
        collection and swapped in only when the rebuild is done; the old store stays usable
        until then, and an interrupted rebuild resumes on the next `reindex` run. With
        `shard` ("i/N"), only that part of the sources is ingested (and pruned).
        """
        from ingest.embedder import EmbedSettings
        from ingest.graph import build_ingest_graph, run_ingest
        from ingest.loaders import LoaderOptions
        from ingest.sync import Shard

        if shard is not None:
            shard = str(Shard.parse(shard))
            if reindex:
                raise ArchivistError(
                    "--reindex cannot be combined with --shard: a rebuild swaps the whole store "
                    "in at once, which one shard cannot do.",
                    "Rebuild on one machine without --shard, or ingest into a new store with "
                    "--shard on every machine.",
                )

        started = time.perf_counter()
        splitter = self._splitter(chunk_size, chunk_overlap)
        sizes = {"batch_size": batch_size, "concurrency": concurrency}
        embed = replace(embed or EmbedSettings(), **{k: v for k, v in sizes.items() if v})
        loader = LoaderOptions(text_field or None, id_field or LoaderOptions.id_field)
        target = self.store(store, must_exist=False)
        wanted = self.embeddings.fingerprint(
            target.fingerprint.get("dimension") if target.exists() else None
        )
        rebuilding = (
            reindex
            and target.exists()
            and not fingerprints_match(target.fingerprint, {**wanted, "sparse": SPARSE_SCHEME})
        )
        writing = target
        if rebuilding:
            writing = target.rebuild_store()
            description = target.description if description is None else description
            if writing.exists() and writing.fingerprint.get("embed_model") != wanted["embed_model"]:
                writing.drop()  # a rebuild for another model was left behind
        graph = build_ingest_graph(
            writing,
            self.embeddings,
            splitter,
            embed=embed,
            loader_options=loader,
            on_progress=on_progress,
        )
        try:
            report = run_ingest(
                graph, list(paths), prune=prune, description=description, shard=shard
            )
        except ArchivistError:
            raise
        except Exception as exc:
            explained = models.explain(exc, self.settings)
            if explained is None:
                raise
            kept = (
                f"Store '{store}' is untouched; run the same command again to resume the rebuild."
                if rebuilding
                else "Chunks stored so far are kept; run the same command again to finish."
            )
            raise ArchivistError(
                f"Ingest stopped: {explained.message}", f"{explained.fix}\n{kept}"
            ) from None
        if rebuilding:
            target.replace_with(writing)
        return {
            "store": store,
            **report,
            "shard": shard,
            "reindexed": rebuilding,
            "points": target.count(),
            "splitter": {
                "chunk_size": splitter.chunk_size,
                "chunk_overlap": splitter.chunk_overlap,
            },
            "seconds": round(time.perf_counter() - started, 2),
        }

    def _splitter(self, chunk_size: int | None, chunk_overlap: int | None):
        """Chunk sizes that fit the embedding model's context: defaults shrink to fit it,
        sizes asked for that cannot fit are refused rather than silently truncated."""
        from ingest.splitter import SplitterSettings

        try:
            splitter = SplitterSettings().resized(chunk_size, chunk_overlap)
        except ValueError as exc:
            raise ArchivistError(f"Cannot split with {exc}.", "Choose other sizes.") from None
        try:
            context = models.embed_context(self.settings)
        except Exception as exc:
            if explained := models.explain(exc, self.settings):
                raise explained from None
            raise
        latin, cjk = splitter.limits(context)
        if chunk_size is not None and (
            splitter.chunk_size > latin or splitter.cjk_chunk_size > cjk
        ):
            raise ArchivistError(
                f"--chunk-size {chunk_size} is too large for {self.settings.embed_model}: it "
                f"reads {context} tokens per chunk, which fits chunks of at most {latin} "
                "characters (code blocks and tables may double a chunk).",
                f"Use --chunk-size {latin} or less, or raise the model's num_ctx in Ollama.",
            )
        return splitter.fitted(context)

    def search(
        self, query: str, store: str, k: int | None = None, mode: SearchMode = "hybrid"
    ) -> list[dict[str, Any]]:
        """Run the retrieval tool alone and return its results."""
        tool = make_retrieval_tool(self.store(store), self.embeddings, k or self.settings.k, mode)
        message = tool.invoke(
            {"name": tool.name, "args": {"query": query}, "id": "search", "type": "tool_call"}
        )
        return message.artifact

    def agent(
        self,
        stores: Sequence[str],
        model: str | None = None,
        checkpointer=None,
        seed: int | None = None,
    ):
        """Build the agent for `stores` with the model's best mode; return (graph, mode).

        The model runs at temperature 0; `seed` fixes its sampling where the model honours it.
        """
        if not stores:
            raise ArchivistError("No store given.", "Name one with --store NAME.")
        model = model or self.settings.chat_model
        opened = [self.store(name) for name in stores]
        tools = [make_retrieval_tool(s, self.embeddings, self.settings.k) for s in opened]
        described = "\n".join(
            f"- {tool.name}: {s.description or 'documents in the ' + s.name + ' store'}"
            for tool, s in zip(tools, opened, strict=True)
        )
        info = models.show(self.settings, model)
        chat = models.chat_model(self.settings, model, temperature=0, seed=seed)
        if info.tools:
            graph = build_agent(
                chat,
                tools,
                prompts.AGENT_SYSTEM.format(stores=described),
                self.settings.max_steps,
                checkpointer,
            )
            return graph, AGENT
        graph = build_retrieve_then_answer(
            chat, tools, prompts.ANSWER_SYSTEM.format(stores=described), checkpointer
        )
        return graph, RETRIEVE_THEN_ANSWER

    def ask(self, question: str, stores: Sequence[str], model: str | None = None) -> dict[str, Any]:
        """Answer one question in a fresh conversation; return the `ask --json` object."""
        graph, mode = self.agent(stores, model)
        return run_turn(graph, question, model or self.settings.chat_model, stores, mode)


def run_turn(
    graph, question: str, model: str, stores: Sequence[str], mode: str, thread_id: str | None = None
) -> dict[str, Any]:
    """Run one turn of a compiled agent graph and describe it as `ask --json` does."""
    started = time.perf_counter()
    config = {"configurable": {"thread_id": thread_id or str(uuid.uuid4())}, "recursion_limit": 100}
    state = graph.invoke(turn_input(question), config)
    answer = state["messages"][-1].content
    citations, invalid = check_citations(answer, state["calls"])
    usage = turn_usage(state["messages"])
    return {
        "question": question,
        "answer": answer,
        "model": model,
        "stores": list(stores),
        "mode": mode,
        "tool_calls": state["calls"],
        "citations": citations,
        "invalid_citations": invalid,
        "latency_ms": round((time.perf_counter() - started) * 1000),
        "usage": usage,
    }


def turn_usage(messages: Sequence[BaseMessage]) -> dict[str, int]:
    """Add up the token counts Ollama reported for the model calls of the last turn."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    replies = [m for m in messages[start + 1 :] if isinstance(m, AIMessage)]
    counted = [m.usage_metadata for m in replies if m.usage_metadata]
    return {
        "model_calls": len(replies),
        "input_tokens": sum(u.get("input_tokens", 0) for u in counted),
        "output_tokens": sum(u.get("output_tokens", 0) for u in counted),
    }
