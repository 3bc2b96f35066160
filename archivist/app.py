"""The application: stores, models and graphs wired from the settings, one call per command."""

import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from archivist import models
from archivist.agent import prompts
from archivist.agent.citations import check_citations
from archivist.agent.context import Window, window_for
from archivist.agent.grading import STRUCTURED_TAG, Grader
from archivist.agent.graph import (
    NOTE_EVENT,
    TOOL_EVENT,
    build_agent,
    build_retrieve_then_answer,
    turn_input,
)
from archivist.agent.retrieval import make_retrieval_tool, tool_name
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError
from archivist.tools.store import (
    KnowledgeStore,
    SearchMode,
    connect,
    finish_swaps,
    heading_path,
    list_stores,
)
from archivist.turnlog import TurnLog

if TYPE_CHECKING:
    from archivist.ingest.embedder import EmbedSettings
    from archivist.tools.progress import ProgressFn

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
        store = KnowledgeStore(self.client, name, self.settings.server_layout)
        store.finish_swap()
        if must_exist:
            store.check(self.embeddings.fingerprint(store.fingerprint.get("dimension")))
        return store

    def stores(self) -> list[dict[str, Any]]:
        """List the stores with their size, model and description."""
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
    ) -> dict[str, Any]:
        """Bring a store in sync with files and folders; return the ingest report.

        With `reindex`, a store built with another embedding model is rebuilt and swapped in
        when done; with `shard` ("i/N"), only that part of the sources is ingested (and
        pruned). The decisions are the write path's (`archivist.ingest.pipeline`).
        """
        from archivist.ingest.pipeline import ingest_options, plan_ingest

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
        )
        with models.explained(self.settings):
            context = models.embed_context(self.settings)
        job = plan_ingest(self.store(store, must_exist=False), self.embeddings, options, context)
        with models.explained(self.settings, doing="Ingest stopped", then=job.kept):
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
    ) -> list[dict[str, Any]]:
        """Run the retrieval tool alone and return its results."""
        from langchain_core.tools import ToolException
        from pydantic import ValidationError

        tool = self.retrieval_tool(self.store(store), k, mode, min_score, mmr)
        args = {"query": query, **({"source": source} if source else {})}
        try:
            message = tool.invoke(
                {"name": tool.name, "args": args, "id": "search", "type": "tool_call"}
            )
        except ToolException as exc:
            raise ArchivistError(
                str(exc).split(" Call ", 1)[0],
                f"Use --source with one of them (archivist sources --store {store} lists all), "
                "or leave it out.",
            ) from None
        except ValidationError as exc:
            problems = "; ".join(e["msg"] for e in exc.errors())
            raise ArchivistError(f"Invalid search: {problems}.") from None
        return message.artifact

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
        s = self.settings
        return make_retrieval_tool(
            store,
            self.embeddings,
            k or s.k,
            mode or s.search_mode,
            s.min_score if min_score is None else min_score,
            s.mmr if mmr is None else mmr,
        )

    def build(
        self,
        stores: Sequence[str],
        model: str | None = None,
        checkpointer=None,
        think: bool | None = None,
        seed: int | None = None,
        grade: bool | None = None,
    ) -> "AgentSetup":
        """Build the agent for `stores` in the model's best mode, sized to its context.

        The model runs at temperature 0; `seed` fixes its sampling where the model honours it.
        With `grade` (default: the setting), the same model grades what each search returned
        and rewrites searches that found nothing relevant; it does so without thinking, since
        a verdict list needs no reasoning and thinking would multiply its cost.
        """
        grade = self.settings.grade if grade is None else grade
        if not stores:
            raise ArchivistError("No store given.", "Name one with --store NAME.")
        model = model or self.settings.chat_model
        opened = [self.store(name) for name in stores]
        tools = [self.retrieval_tool(s) for s in opened]
        described = "\n".join(
            f"- {tool.name}: {s.description or 'documents in the ' + s.name + ' store'}"
            for tool, s in zip(tools, opened, strict=True)
        )
        info = models.show(self.settings, model)
        window = window_for(info.context_length, self.settings.num_ctx)
        notices = []
        # Only a model that can think is sent `think`; Ollama refuses it to the others.
        reasoning = None
        if info.thinking:
            reasoning = True if think is None else think
        elif think:
            notices.append(f"{model} has no thinking mode; it answers without one.")

        def chat_model(reasoning: bool | None):
            return models.chat_model(
                self.settings,
                model,
                temperature=0,
                num_ctx=window.num_ctx,
                num_predict=window.answer,
                reasoning=reasoning,
                seed=seed,
            )

        chat = chat_model(reasoning)
        grader = None
        if grade:
            # Grades are structured output: a thinking model grades with thinking off.
            grader = Grader(chat_model(False) if reasoning else chat, self.settings.max_rewrites)
        if info.tools:
            graph = build_agent(
                chat,
                tools,
                prompts.AGENT_SYSTEM.format(stores=described),
                self.settings.max_steps,
                checkpointer,
                window,
                grader,
            )
            mode = AGENT
        else:
            graph = build_retrieve_then_answer(
                chat,
                tools,
                prompts.ANSWER_SYSTEM.format(stores=described),
                checkpointer,
                window,
                grader,
            )
            mode = RETRIEVE_THEN_ANSWER
            notices.append(f"{model} cannot call tools: using retrieve-then-answer.")
        return AgentSetup(
            graph, mode, model, list(stores), info, window, bool(reasoning), notices, bool(grade)
        )

    def agent(
        self,
        stores: Sequence[str],
        model: str | None = None,
        checkpointer=None,
        seed: int | None = None,
        grade: bool | None = None,
    ):
        """Build the agent for `stores` with the model's best mode; return (graph, mode)."""
        setup = self.build(stores, model, checkpointer, seed=seed, grade=grade)
        return setup.graph, setup.mode

    def ask(
        self,
        question: str,
        stores: Sequence[str],
        model: str | None = None,
        think: bool | None = None,
        grade: bool | None = None,
        on_event: Callable[[str, Any], None] | None = None,
    ) -> dict[str, Any]:
        """Answer one question in a fresh conversation, log it; return the `ask --json` object.

        `on_event` hears the turn as it runs, as `run_turn` describes."""
        setup = self.build(stores, model, think=think, grade=grade)
        return logged_turn(self.turn_log, "ask", setup, question, on_event=on_event)


@dataclass
class AgentSetup:
    """A compiled agent graph and what the user should know about it."""

    graph: Any
    mode: str
    """AGENT or RETRIEVE_THEN_ANSWER."""
    model: str
    stores: list[str]
    info: models.ModelInfo
    window: Window
    thinking: bool
    """Whether the model is asked to think before answering."""
    notices: list[str] = field(default_factory=list)
    """Things to tell the user once (the mode, an ignored --think)."""
    grade: bool = False
    """Whether retrieved passages are graded (and missed searches rewritten)."""


class _Relay(BaseCallbackHandler):
    """Pass a running turn's progress to a chat view: tokens, reasoning, tool calls, notes."""

    raise_error = True

    def __init__(self, on_event: Callable[[str, Any], None]) -> None:
        self.on_event = on_event

    def on_llm_new_token(self, token: str, *, chunk=None, **kwargs: Any) -> None:
        if STRUCTURED_TAG in (kwargs.get("tags") or ()):
            return  # the grader's JSON is not the answer
        message = getattr(chunk, "message", None)
        reasoning = message.additional_kwargs.get("reasoning_content") if message else None
        if reasoning:
            self.on_event("thinking", reasoning)
        if token:
            self.on_event("token", token)

    def on_custom_event(self, name: str, data: Any, **kwargs: Any) -> None:
        if name == TOOL_EVENT:
            self.on_event("tool", data)
        elif name == NOTE_EVENT:
            self.on_event("note", data)
        elif name == models.RETRY_EVENT:
            self.on_event("retry", data)


def run_turn(
    graph,
    question: str,
    model: str,
    stores: Sequence[str],
    mode: str,
    thread_id: str | None = None,
    *,
    on_event: Callable[[str, Any], None] | None = None,
    grade: bool = False,
) -> dict[str, Any]:
    """Run one turn of a compiled agent graph and describe it as `ask --json` does.

    `on_event(kind, data)` hears the turn as it runs: "token" and "thinking" text as the model
    streams it, "tool" with each finished tool call's record, "note" when the context guard
    left something out, "retry" when a model request Ollama refused is tried again. `grade`
    says whether the graph grades its searches (reported as is).
    """
    started = time.perf_counter()
    config: dict[str, Any] = {
        "configurable": {"thread_id": thread_id or str(uuid.uuid4())},
        "recursion_limit": 100,
    }
    if on_event is not None:
        config["callbacks"] = [_Relay(on_event)]
    state = graph.invoke(turn_input(question), config)
    messages = state["messages"]
    answer = messages[-1].content
    citations, invalid = check_citations(answer, state["calls"])
    usage = turn_usage(messages, state.get("aux") or [])
    return {
        "question": question,
        "answer": answer,
        "model": model,
        "stores": list(stores),
        "mode": mode,
        "grade": grade,
        "tool_calls": state["calls"],
        "citations": citations,
        "invalid_citations": invalid,
        "notes": list(dict.fromkeys(state.get("notes") or [])),
        "latency_ms": round((time.perf_counter() - started) * 1000),
        "usage": usage,
    }


def turn_usage(
    messages: Sequence[BaseMessage], aux: Sequence[dict[str, Any]] = ()
) -> dict[str, int]:
    """Add up the token counts Ollama reported for the model calls of the last turn.

    `aux` are the grader's calls (grading and rewriting), which leave no message behind; they
    count in the totals and are also counted apart.
    """
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    replies = [m for m in messages[start + 1 :] if isinstance(m, AIMessage)]
    counted = [m.usage_metadata for m in replies if m.usage_metadata]
    usage = {
        "model_calls": len(replies) + len(aux),
        "input_tokens": sum(u.get("input_tokens", 0) for u in [*counted, *aux]),
        "output_tokens": sum(u.get("output_tokens", 0) for u in [*counted, *aux]),
        "grade_calls": sum(1 for a in aux if a["kind"] == "grade"),
        "rewrite_calls": sum(1 for a in aux if a["kind"] == "rewrite"),
    }
    return usage


def logged_turn(
    log: TurnLog,
    command: str,
    setup: AgentSetup,
    question: str,
    thread_id: str | None = None,
    on_event: Callable[[str, Any], None] | None = None,
) -> dict[str, Any]:
    """Run a turn and log it; a failed or stopped turn is logged with its error."""
    started = time.perf_counter()
    try:
        result = run_turn(
            setup.graph,
            question,
            setup.model,
            setup.stores,
            setup.mode,
            thread_id,
            on_event=on_event,
            grade=setup.grade,
        )
    except BaseException as exc:
        reason = "stopped by the user" if isinstance(exc, KeyboardInterrupt) else repr(exc)
        partial = {
            "question": question,
            "model": setup.model,
            "mode": setup.mode,
            "stores": setup.stores,
            "latency_ms": round((time.perf_counter() - started) * 1000),
        }
        log.record(partial, command, thread_id, error=reason)
        raise
    log.record(result, command, thread_id)
    return result


def new_thread_id() -> str:
    """Make a conversation id short enough to type after --thread."""
    return uuid.uuid4().hex[:12]


class Conversation:
    """A chat: the agent over some stores, one thread in the checkpointer, the last results."""

    def __init__(
        self,
        archivist: Archivist,
        stores: Sequence[str],
        checkpointer,
        model: str | None = None,
        think: bool | None = None,
        thread_id: str | None = None,
        grade: bool | None = None,
    ) -> None:
        self.archivist = archivist
        self.checkpointer = checkpointer
        self.think = think
        self.grade = grade
        self.setup = self._build(list(stores), model)
        self.thread_id = thread_id or new_thread_id()
        self.last_calls: list[dict[str, Any]] = []

    def _explained(self, exc: Exception) -> Exception:
        return models.explain(exc, self.archivist.settings) or exc

    def _build(self, stores: list[str], model: str | None) -> AgentSetup:
        try:
            return self.archivist.build(
                stores, model, self.checkpointer, self.think, grade=self.grade
            )
        except ArchivistError:
            raise
        except Exception as exc:
            raise self._explained(exc) from None

    @property
    def config(self) -> dict[str, Any]:
        return {"configurable": {"thread_id": self.thread_id}}

    def messages(self) -> list[Any]:
        """Return the messages kept for this conversation so far."""
        return self.setup.graph.get_state(self.config).values.get("messages", [])

    def answer(self, question: str, on_event: Callable[[str, Any], None]) -> dict[str, Any]:
        """Answer in this conversation, streaming progress to `on_event`; log the turn."""
        try:
            result = logged_turn(
                self.archivist.turn_log, "chat", self.setup, question, self.thread_id, on_event
            )
        except ArchivistError:
            raise
        except Exception as exc:
            raise self._explained(exc) from None
        finally:
            self._settle_thread()
        self.last_calls = result["tool_calls"]
        return result

    def _settle_thread(self) -> None:
        """After a stopped or failed turn, drop its unfinished steps from the thread.

        Otherwise the next question would resume them (a search half done) instead of
        starting a turn of its own. What was said stays; a tool call left without its result
        is skipped when the history is sent (archivist.agent.context.complete_tool_calls).
        """
        state = self.setup.graph.get_state(self.config)
        if state.next:
            self.setup.graph.update_state(self.config, None, as_node="__end__")

    def new(self) -> str:
        """Start a new conversation; return its id."""
        self.thread_id = new_thread_id()
        self.last_calls = []
        return self.thread_id

    def switch_model(self, name: str) -> list[str]:
        """Use another chat model from now on, re-probing what it can do."""
        self.setup = self._build(self.setup.stores, name)
        return self.setup.notices

    def describe(self) -> str:
        """Say which model, mode, stores and thread this chat uses."""
        setup = self.setup
        thinking = " · thinking" if setup.thinking else ""
        grading = " · grading" if setup.grade else ""
        return (
            f"{setup.model} · {setup.mode}{thinking}{grading} · "
            f"{setup.window.num_ctx}-token context · "
            f"stores: {', '.join(setup.stores)} · thread {self.thread_id}"
        )

    def stores(self) -> list[dict[str, Any]]:
        """List all stores, marking those this chat searches."""
        return [{**s, "in_use": s["store"] in self.setup.stores} for s in self.archivist.stores()]

    def sources(self) -> list[dict[str, Any]]:
        """Return the last answered turn's search results, in citation order."""
        return [r for call in self.last_calls for r in call["results"]]


def turn_passages(turn: dict[str, Any]) -> list[dict[str, Any]]:
    """Flatten a turn's trajectory for a table: one record per passage each tool call
    returned (a call that failed or found nothing: one record with its error), in call order,
    with the call's number, tool and arguments, and whether the answer cited the passage."""
    cited = {citation["n"] for citation in turn["citations"]}
    records = []
    for number, call in enumerate(turn["tool_calls"], start=1):
        made = {"call": number, "tool": call["name"], "args": call["args"]}
        if not call["results"]:
            records.append({**made, "error": call.get("error")})
        for result in call["results"]:
            records.append(
                {
                    **made,
                    "n": result.get("n"),
                    "rank": result["rank"],
                    "score": result["score"],
                    "source": result["source"],
                    "heading": heading_path(result["metadata"]),
                    "cited": result.get("n") in cited,
                    "text": result["text"],
                }
            )
    return records
