"""The graphs LangGraph Server serves (`langgraph dev`, `langgraph up`): see langgraph.json.

Both graphs take their settings from the run's context (`context_schema=ServerContext`):
what a run's context leaves out comes from the environment, as for the command line, so one
server can serve runs for different Ollama hosts, models and Qdrant servers. The work is
done by the same application code as the CLI's (`archivist.app.Archivist`), so a served
answer or ingest is the one `archivist ask` or `archivist ingest` would give.

The agent is served as its real graph, so LangGraph Studio draws and steps through its nodes:
one static graph, wired by archivist.agent.graph as the CLI's graphs are, whose steps take the
run's collaborators, built once per process for each run's settings (`run_setup`). Their
store client takes the embedded store's lease per search only, so no paused or finished run
keeps another process from it. The ingest graph is one node: its embedding requests in
flight and the store belong to the run.
"""

import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.config import get_stream_writer
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.runtime import Runtime
from typing_extensions import TypedDict  # pydantic reads its schema on Python 3.11 too

from archivist.agent.documents import checked_toolset
from archivist.agent.graph import add_agent, add_retrieve_then_answer
from archivist.agent.records import ToolCall
from archivist.agent.setup import AGENT, RETRIEVE_THEN_ANSWER, AgentSetup
from archivist.agent.state import AgentState, turn_reset
from archivist.agent.steps import after_model
from archivist.app import Archivist
from archivist.failures import explained
from archivist.ingest.request import IngestRequest
from archivist.settings import DEFAULT_STORE, Settings, load_settings, normalize_host
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import as_dict


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
    grade: bool | None = None
    """Grade each search's passages with the chat model, rewriting searches that miss."""
    tools: str | None = None
    """The tools each store gives the model: "search", or "all" (search, list and read)."""


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
        tools=checked_toolset(context.tools) if context.tools else None,
    )


class ServerAgentState(AgentState):
    mode: str
    """How the turn is answered: "agent", or "retrieve-then-answer" (for a model without tools)."""


class ServerAgentOutput(MessagesState):
    calls: list[ToolCall]
    """The last turn's tool calls: name, arguments, numbered results, latency, error."""
    mode: str
    """How the last turn was answered: "agent", or "retrieve-then-answer"."""
    notes: list[str]
    """The last turn's notes: what was left out to fit the context window."""


_setups: OrderedDict[tuple[Settings, tuple[str, ...], bool | None], tuple[Archivist, AgentSetup]]
_setups = OrderedDict()
_setups_lock = threading.Lock()
MAX_SETUPS = 8
"""Run agents kept built at once; the one used least recently is closed past it (a server
whose clients vary the model or stores per run does not keep every store open forever)."""


def run_setup(context: ServerContext | None) -> AgentSetup:
    """Return the run's agent (models, tools, steps), built once per process per settings.

    Building it asks Ollama what the model can do (/api/show) and opens the stores, so it is
    done on a run's first step and reused by every later step and run with the same settings.
    Keeping the store's client open holds nobody off: it takes the embedded store's lease per
    search and gives it up when another process asks (docs/concurrency.md).
    """
    context = context or ServerContext()
    settings = run_settings(context)
    stores = tuple(context.stores or [DEFAULT_STORE])
    key = (settings, stores, context.grade)
    with _setups_lock:
        if key not in _setups:
            archivist = Archivist(settings)
            with archivist.released_on_failure():
                _setups[key] = archivist, archivist.agent(stores, grade=context.grade)
            while len(_setups) > MAX_SETUPS:
                _setups.popitem(last=False)[1][0].close()
        _setups.move_to_end(key)
        return _setups[key][1]


def release_setups() -> None:
    """Close the stores of the run agents built so far and forget them (their next run builds
    them again), e.g. before removing a home."""
    with _setups_lock:
        for archivist, _ in _setups.values():
            archivist.close()
        _setups.clear()


class RunSteps:
    """The agent's steps as the server runs them, over the collaborators of each run.

    A step takes the run's agent from its context (`run_setup`, built as `archivist ask`
    builds it) and runs the real step of archivist.agent.steps: one graph serves every run.
    """

    def _steps(self, runtime: Runtime[ServerContext], mode: str) -> Any:
        setup = run_setup(runtime.context)
        if setup.mode != mode:
            raise ArchivistError(
                f"{setup.model} changed during the turn: it was answering as {mode}.",
                "Send the question again.",
            )
        return setup.steps

    def _run(self, runtime: Runtime[ServerContext], mode: str, step: str, state: Any) -> dict:
        """Run a step of the run's agent; a failure the user can fix (Ollama unreachable, a
        model not pulled) is raised worded with its fix, which the server shows the client."""
        with explained(run_settings(runtime.context)):
            return getattr(self._steps(runtime, mode), step)(state)

    def start_turn(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Choose how the model answers and clear the last turn's calls and notes."""
        return {**turn_reset(), "mode": run_setup(runtime.context).mode}

    def by_mode(self, state: ServerAgentState) -> str:
        """Go to the tool-calling loop, or to retrieve-then-answer."""
        return "call_model" if state["mode"] == AGENT else "retrieve"

    def call_model(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Ask the model for its next move: tool calls, or the answer."""
        return self._run(runtime, AGENT, "call_model", state)

    def route(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> str:
        """Run the model's tool calls, refuse them at the run's step limit, or end."""
        return after_model(state, run_settings(runtime.context).max_steps)

    def run_tools(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Run the model's tool calls; with grading, hand the searches to the grade step."""
        return self._run(runtime, AGENT, "run_tools", state)

    def grade(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Grade the waiting searches, search again where all missed, answer each tool call."""
        return self._run(runtime, AGENT, "grade", state)

    def stop_searching(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Refuse the tool calls past the step limit; ask for the answer from what was found."""
        return self._run(runtime, AGENT, "stop_searching", state)

    def retrieve(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Search every store with the question."""
        return self._run(runtime, RETRIEVE_THEN_ANSWER, "retrieve", state)

    def grade_retrieved(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Grade the searches, search again while all missed; record what the answer shows."""
        return self._run(runtime, RETRIEVE_THEN_ANSWER, "grade", state)

    def answer(self, state: ServerAgentState, runtime: Runtime[ServerContext]) -> dict:
        """Answer the question from the passages found."""
        return self._run(runtime, RETRIEVE_THEN_ANSWER, "answer", state)


def build_server_agent():
    """Build the served agent: both of the application's agent graphs behind one start.

    `start_turn` picks the tool-calling loop or retrieve-then-answer for the run's model, as
    `Archivist.agent` does; both are wired by archivist.agent.graph, with their grade steps
    (`grade`, `grade_retrieved`) passed through when the run grades. Every step gets its
    collaborators from the run (see RunSteps).
    """
    steps = RunSteps()
    builder = StateGraph(
        ServerAgentState,
        context_schema=ServerContext,
        input_schema=MessagesState,
        output_schema=ServerAgentOutput,
    )
    builder.add_node(steps.start_turn)
    builder.add_edge(START, "start_turn")
    builder.add_conditional_edges("start_turn", steps.by_mode, ["call_model", "retrieve"])
    add_agent(builder, steps, steps.grade)
    add_retrieve_then_answer(builder, steps, steps.grade_retrieved)
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
    request = IngestRequest.build(
        state["paths"],
        state["store"],
        prune=state.get("prune", False),
        description=state.get("description"),
        reindex=state.get("reindex", False),
        shard=state.get("shard"),
    )
    settings = run_settings(runtime.context)
    write = get_stream_writer()
    archivist = Archivist(settings)
    try:
        with explained(settings):
            report = archivist.ingest(request, on_progress=lambda event: write(as_dict(event)))
    finally:
        archivist.close()
    return {"report": report.to_dict()}


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
