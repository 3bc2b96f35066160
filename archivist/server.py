"""The graphs LangGraph Server serves (`langgraph dev`, `langgraph up`): see langgraph.json.

Both graphs take their settings from the run's context (`context_schema=ServerContext`):
what a run's context leaves out comes from the environment, as for the command line. Each
run opens the stores for its own duration, so one server can serve runs for different Ollama
hosts, models and Qdrant servers, and the embedded store is not held between runs. The work
itself is done by the same application code as the CLI's (`archivist.app.Archivist`), so a
served answer or ingest is the one `archivist ask` or `archivist ingest` would give.
"""

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic reads its schema on Python 3.11 too

from archivist import models
from archivist.agent.records import ToolCall
from archivist.agent.state import turn_input
from archivist.app import Archivist
from archivist.settings import DEFAULT_STORE, Settings, load_settings, normalize_host
from archivist.tools.errors import ArchivistError


@dataclass
class ServerContext:
    """Settings a run may set in its context; a field left at None keeps the environment's.

    The Qdrant API key is deliberately not here: run contexts are stored with the runs, so
    the key comes from the server's environment (`QDRANT_API_KEY`) only.
    """

    ollama_host: str | None = None
    chat_model: str | None = None
    embed_model: str | None = None
    home: str | None = None
    """Where the embedded store lives (ignored when `qdrant_url` is set)."""
    qdrant_url: str | None = None
    stores: list[str] | None = None
    """The stores the agent searches, one tool each (default: shop_docs)."""
    k: int | None = None
    max_steps: int | None = None


def run_settings(context: ServerContext | None) -> Settings:
    """Return the settings of a run: the environment's, overridden by the run's context."""
    context = context or ServerContext()
    return load_settings().with_overrides(
        ollama_host=normalize_host(context.ollama_host) if context.ollama_host else None,
        chat_model=context.chat_model,
        embed_model=context.embed_model,
        home=Path(context.home).expanduser() if context.home else None,
        qdrant_url=context.qdrant_url,
        k=context.k,
        max_steps=context.max_steps,
    )


class ServerAgentState(MessagesState):
    calls: list[ToolCall]
    """The last turn's tool calls: name, arguments, numbered results, latency, error."""
    mode: str
    """How the last turn was answered: "agent", or "retrieve-then-answer"."""


def answer(state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict[str, Any]:
    """Answer the last message with the agent over the run's stores, given the conversation."""
    settings = run_settings(runtime.context)
    stores = (runtime.context and runtime.context.stores) or [DEFAULT_STORE]
    archivist = Archivist(settings)
    history = state["messages"]
    try:
        with models.explained(settings):
            setup = archivist.agent(stores)
            # A new turn's reset fields, with the thread's whole conversation as its messages.
            start = {**turn_input(""), "messages": history}
            turn = setup.graph.invoke(start, {"recursion_limit": 100})
    finally:
        archivist.close()
    calls = turn["calls"]
    return {"messages": turn["messages"][len(history) :], "calls": calls, "mode": setup.mode}


def build_server_agent():
    """Build the served agent: one node that runs the application's agent for the turn."""
    builder = StateGraph(ServerAgentState, context_schema=ServerContext)
    builder.add_node(answer)
    builder.add_edge(START, "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="agent")


class ServerIngestInput(TypedDict, total=False):
    paths: list[str]
    """Files and folders on the server's disk (relative ones from its working folder)."""
    store: str
    """The store to bring in sync with them."""
    prune: bool
    description: str | None
    shard: str | None
    """Only this part of the sources, `i/N`, as `archivist ingest --shard`."""
    reindex: bool


class ServerIngestOutput(TypedDict, total=False):
    report: dict[str, Any]
    """The report `archivist ingest --json` prints."""


class ServerIngestState(ServerIngestInput, ServerIngestOutput):
    pass


def ingest(state: ServerIngestState, runtime: Runtime[ServerContext]) -> dict[str, Any]:
    """Ingest the paths into the store; progress events go to the `custom` stream."""
    if not state.get("store") or not state.get("paths"):
        raise ArchivistError(
            "An ingest run needs `paths` and `store` in its input.",
            'Send e.g. {"paths": ["docs"], "store": "my_docs"}.',
        )
    settings = run_settings(runtime.context)
    write = get_stream_writer()
    archivist = Archivist(settings)
    try:
        with models.explained(settings):
            report = archivist.ingest(
                state["paths"],
                state["store"],
                state.get("prune", False),
                state.get("description"),
                lambda event, data: write({"event": event, **data}),
                reindex=state.get("reindex", False),
                shard=state.get("shard"),
            )
    finally:
        archivist.close()
    return {"report": report}


def build_server_ingest():
    """Build the served ingest graph: one node that runs the application's ingest."""
    builder = StateGraph(
        ServerIngestState,
        context_schema=ServerContext,
        input_schema=ServerIngestInput,
        output_schema=ServerIngestOutput,
    )
    builder.add_node(ingest)
    builder.add_edge(START, "ingest")
    builder.add_edge("ingest", END)
    return builder.compile(name="ingest")


agent_graph = build_server_agent()
ingest_graph = build_server_ingest()
