"""The application: stores, models and graphs wired from the settings, one call per command."""

import time
import uuid
from collections.abc import Callable, Sequence
from functools import cached_property
from typing import Any

from agent import models, prompts
from agent.citations import check_citations
from agent.graph import build_agent, build_retrieve_then_answer, turn_input
from agent.settings import Settings
from tools.errors import ArchivistError
from tools.retrieval import make_retrieval_tool, tool_name
from tools.store import KnowledgeStore, SearchMode, connect, list_stores

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
            legacy_path=self.settings.legacy_store_path,
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
        store = KnowledgeStore(self.client, name)
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
    ) -> dict[str, Any]:
        """Bring a store in sync with files and folders; return the ingest report."""
        from ingest.graph import build_ingest_graph, run_ingest

        target = self.store(store, must_exist=False)
        graph = build_ingest_graph(target, self.embeddings, on_progress=on_progress)
        report = run_ingest(graph, list(paths), prune=prune, description=description)
        return {"store": store, **report, "points": target.count()}

    def search(
        self, query: str, store: str, k: int | None = None, mode: SearchMode = "hybrid"
    ) -> list[dict[str, Any]]:
        """Run the retrieval tool alone and return its results."""
        tool = make_retrieval_tool(self.store(store), self.embeddings, k or self.settings.k, mode)
        message = tool.invoke(
            {"name": tool.name, "args": {"query": query}, "id": "search", "type": "tool_call"}
        )
        return message.artifact

    def agent(self, stores: Sequence[str], model: str | None = None, checkpointer=None):
        """Build the agent for `stores` with the model's best mode; return (graph, mode)."""
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
        chat = models.chat_model(self.settings, model, temperature=0)
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
    }
