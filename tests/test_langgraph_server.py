"""langgraph.json: both graphs load as LangGraph Server loads them, and run from their context."""

import importlib.util
import json
import sys

import pytest
from conftest import ROOT, SHOP, run_cli, write_files
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.pregel import Pregel

from archivist.app import Archivist
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError

DEAD = "http://127.0.0.1:9"  # nothing listens here: settings must come from the context


def load_graph(spec: str) -> Pregel:
    """Resolve "./path/to/file.py:attr" the way the LangGraph CLI and API server do: import
    the file by its path under a module name of its own, take the attribute, and call it if
    it is a factory (with a config when it takes one)."""
    path, attr = spec.rsplit(":", 1)
    name = path.lstrip("./").replace("/", "__").removesuffix(".py")
    module_spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    module_spec.loader.exec_module(module)
    value = getattr(module, attr)
    if callable(value) and not isinstance(value, Pregel):
        takes = value.__code__.co_argcount
        value = value(RunnableConfig(configurable={})) if takes else value()
    return value


@pytest.fixture(scope="module")
def graphs() -> dict[str, Pregel]:
    config = json.loads((ROOT / "langgraph.json").read_text())
    return {graph_id: load_graph(spec) for graph_id, spec in config["graphs"].items()}


@pytest.fixture
def no_env_ollama(monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", DEAD)


def test_langgraph_json_registers_both_graphs_under_their_names(graphs):
    config = json.loads((ROOT / "langgraph.json").read_text())
    assert config["dependencies"] == ["."]
    assert set(graphs) == {"agent", "ingest"}
    for graph_id, graph in graphs.items():
        assert isinstance(graph, Pregel)
        assert graph.name == graph_id
        assert graph.checkpointer is None, "the server brings its own persistence"
    context = graphs["agent"].get_context_jsonschema()
    assert {"ollama_host", "chat_model", "embed_model", "stores", "qdrant_url"} <= set(
        context["properties"]
    )
    assert "qdrant_api_key" not in context["properties"]
    assert set(graphs["ingest"].get_input_jsonschema()["properties"]) >= {"paths", "store"}


def test_the_served_graphs_ingest_and_answer_with_settings_from_the_run_context(
    graphs, ollama, tmp_path, home, no_env_ollama
):
    context = {"ollama_host": ollama.url, "home": str(tmp_path / "served")}
    done = graphs["ingest"].invoke(
        {"paths": [str(SHOP)], "store": "shop_docs", "description": "policies of a shop"},
        context=context,
    )
    report = done["report"]
    assert report["store"] == "shop_docs" and len(report["stored"]) == 10
    assert (tmp_path / "served" / "edge").is_dir()
    assert not (home / "edge").exists(), "ARCHIVIST_HOME from the environment is not used"
    assert ollama.requests_to("/api/embed"), "the context's Ollama embedded the chunks"

    agent = graphs["agent"].copy(update={"checkpointer": InMemorySaver()})  # as the server does
    thread = {"configurable": {"thread_id": "t1"}}
    question = {"role": "user", "content": "How many days do I have to ask for a refund?"}
    state = agent.invoke(
        {"messages": [question]}, thread, context={**context, "stores": ["shop_docs"]}
    )
    assert state["mode"] == "agent"
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]
    assert isinstance(state["messages"][-1], AIMessage) and state["messages"][-1].content
    # The served turn is the turn `archivist ask` makes with the same settings.
    cli_app = Archivist(Settings(ollama_host=ollama.url, home=tmp_path / "served"))
    try:
        asked = cli_app.ask(question["content"], ["shop_docs"])
    finally:
        cli_app.close()
    assert asked["answer"] == state["messages"][-1].content

    def without_latency(calls):
        return [{k: v for k, v in c.items() if k != "latency_ms"} for c in calls]

    assert without_latency(state["calls"]) == without_latency(asked["tool_calls"])
    assert any(isinstance(m, ToolMessage) for m in state["messages"])
    chat = ollama.requests_to("/api/chat")[-1]
    assert [t["function"]["name"] for t in chat["tools"]] == ["search_shop_docs"]
    assert "policies of a shop" in chat["tools"][0]["function"]["description"]

    follow_up = {"role": "user", "content": "And how long does standard shipping take?"}
    state = agent.invoke(
        {"messages": [follow_up]}, thread, context={**context, "stores": ["shop_docs"]}
    )
    # The agent's requests (the follow-up was also condensed, in a request of its own).
    sent = [b for b in ollama.requests_to("/api/chat") if b.get("tools")][-2]["messages"]
    assert [m["content"] for m in sent if m["role"] == "user"] == [
        question["content"],
        follow_up["content"],
    ], "the thread's history reaches the model"
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]


def test_progress_is_streamed_on_the_custom_stream(graphs, ollama, tmp_path, no_env_ollama):
    context = {"ollama_host": ollama.url, "home": str(tmp_path / "served")}
    events = [
        chunk["event"]
        for chunk in graphs["ingest"].stream(
            {"paths": [str(SHOP / "refund.md")], "store": "docs"},
            context=context,
            stream_mode="custom",
        )
    ]
    assert events[0] == "discovered" and "stored" in events


def test_without_a_context_the_environment_applies(graphs, ollama, home, monkeypatch):
    monkeypatch.setenv("OLLAMA_HOST", ollama.url)
    done = graphs["ingest"].invoke({"paths": [str(SHOP / "refund.md")], "store": "docs"})
    assert [s["source"] for s in done["report"]["stored"]] == ["refund.md"]
    assert (home / "edge").is_dir()


def test_a_run_with_the_wrong_ollama_fails_with_the_fix(graphs, tmp_path, no_env_ollama):
    with pytest.raises(ArchivistError, match="Cannot reach Ollama at http://127.0.0.1:9"):
        graphs["ingest"].invoke(
            {"paths": [str(SHOP)], "store": "docs"}, context={"home": str(tmp_path / "h")}
        )
    with pytest.raises(ArchivistError, match="needs `paths` and `store`"):
        graphs["ingest"].invoke({"paths": [str(SHOP)]}, context={"home": str(tmp_path / "h")})


def served_nodes(graph: Pregel, question: str, context: dict, config=None, **kwargs) -> list[str]:
    """Run a turn of the served graph; return the nodes it passed through, in order."""
    updates = graph.stream(
        {"messages": [{"role": "user", "content": question}]},
        config,
        context=context,
        stream_mode="updates",
        **kwargs,
    )
    return [node for update in updates for node in update]


def test_the_served_agent_is_the_real_graph_for_studio(graphs):
    drawn = graphs["agent"].get_graph()
    assert {"call_model", "run_tools", "grade", "stop_searching"} <= set(drawn.nodes)
    assert {"retrieve", "grade_retrieved", "answer"} <= set(drawn.nodes)
    edges = {(e.source, e.target) for e in drawn.edges}
    assert {
        ("__start__", "start_turn"),
        ("start_turn", "call_model"),
        ("start_turn", "retrieve"),
        ("call_model", "run_tools"),
        ("call_model", "stop_searching"),
        ("call_model", "__end__"),
        ("run_tools", "grade"),
        ("run_tools", "call_model"),
        ("grade", "call_model"),
        ("retrieve", "grade_retrieved"),
        ("grade_retrieved", "answer"),
        ("answer", "__end__"),
    } <= edges
    assert set(graphs["agent"].get_input_jsonschema()["properties"]) == {"messages"}
    assert {"messages", "calls", "mode"} <= set(
        graphs["agent"].get_output_jsonschema()["properties"]
    )


def test_a_served_turn_passes_through_the_grade_node_when_the_run_grades(
    graphs, ollama, home, shop_store, no_env_ollama
):
    context = {"ollama_host": ollama.url, "home": str(home), "stores": [shop_store]}
    question = "How many days do I have to ask for a refund?"
    plain = served_nodes(graphs["agent"], question, context)
    assert plain == ["start_turn", "call_model", "run_tools", "call_model"]

    graded = served_nodes(graphs["agent"], question, {**context, "grade": True})
    assert graded == ["start_turn", "call_model", "run_tools", "grade", "call_model"]
    state = graphs["agent"].invoke(
        {"messages": [{"role": "user", "content": question}]}, context={**context, "grade": True}
    )
    assert state["mode"] == "agent"
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]
    assert "kept" in state["calls"][0], "the grade step's verdicts are in the turn's calls"
    requests = ollama.requests_to("/api/chat")
    assert any("grades" in (r.get("format") or {}).get("properties", {}) for r in requests)


def test_a_model_without_tools_is_served_retrieve_then_answer(
    graphs, ollama, home, shop_store, no_env_ollama
):
    context = {
        "ollama_host": ollama.url,
        "home": str(home),
        "stores": [shop_store],
        "chat_model": "gemma-notools:1b",
    }
    question = "How many days do I have to ask for a refund?"
    assert served_nodes(graphs["agent"], question, context) == ["start_turn", "retrieve", "answer"]
    graded = served_nodes(graphs["agent"], question, {**context, "grade": True})
    assert graded == ["start_turn", "retrieve", "grade_retrieved", "answer"]
    state = graphs["agent"].invoke(
        {"messages": [{"role": "user", "content": question}]}, context=context
    )
    assert state["mode"] == "retrieve-then-answer"
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]
    assert isinstance(state["messages"][-1], AIMessage) and state["messages"][-1].content
    assert not any(r.get("tools") for r in ollama.requests_to("/api/chat"))


def test_a_run_stopped_between_steps_holds_no_store(
    graphs, ollama, home, shop_store, settings, no_env_ollama
):
    # A breakpoint in Studio stops a run between two steps for as long as the user likes.
    agent = graphs["agent"].copy(update={"checkpointer": InMemorySaver()})
    thread = {"configurable": {"thread_id": "paused"}}
    context = {"ollama_host": ollama.url, "home": str(home), "stores": [shop_store]}
    question = "How many days do I have to ask for a refund?"
    before = served_nodes(agent, question, context, thread, interrupt_before=["run_tools"])
    assert before == ["start_turn", "call_model", "__interrupt__"]

    other = Archivist(settings)  # e.g. `archivist ingest` while the run waits
    try:
        assert [s["store"] for s in other.stores()] == [shop_store]
    finally:
        other.close()
    resumed = [node for update in agent.stream(None, thread, context=context) for node in update]
    assert resumed == ["run_tools", "call_model"]
    state = agent.get_state(thread).values
    assert [c["name"] for c in state["calls"]] == ["search_shop_docs"]


def test_served_turns_build_the_run_agent_once_per_process(
    graphs, ollama, home, shop_store, no_env_ollama
):
    context = {"ollama_host": ollama.url, "home": str(home), "stores": [shop_store]}
    question = "How many days do I have to ask for a refund?"
    for _ in range(2):
        assert served_nodes(graphs["agent"], question, context) == [
            "start_turn",
            "call_model",
            "run_tools",
            "call_model",
        ]
    assert len(ollama.requests_to("/api/show")) == 1, "Ollama is asked about the model once"

    without_tools = {**context, "chat_model": "gemma-notools:1b"}
    for _ in range(2):
        nodes = served_nodes(graphs["agent"], question, without_tools)
        assert nodes == ["start_turn", "retrieve", "answer"]
    assert len(ollama.requests_to("/api/show")) == 2, "once more, for the other run settings"


def test_another_process_ingests_between_served_turns(
    graphs, ollama, home, shop_store, tmp_path, no_env_ollama
):
    context = {"ollama_host": ollama.url, "home": str(home), "stores": [shop_store]}
    agent = graphs["agent"]
    served_nodes(agent, "How many days do I have to ask for a refund?", context)  # store open

    new = write_files(
        tmp_path / "new",
        {"gift-cards.md": "# Gift cards\n\nGift cards never expire and pay for any order.\n"},
    )
    done = run_cli(
        "ingest",
        str(new),
        "--store",
        shop_store,
        "--wait",
        "5",
        ollama_url=ollama.url,
        home=home,
        process=True,
    )
    assert done.returncode == 0, done.stderr
    state = agent.invoke(
        {"messages": [{"role": "user", "content": "Do gift cards expire?"}]}, context=context
    )
    found = [r["source"] for c in state["calls"] for r in c["results"]]
    # A second root: each source is now named with its root's label.
    assert "new/gift-cards.md" in found, "the next served turn sees what the ingest stored"


def test_the_served_agents_kept_built_are_bounded(ollama, home, shop_store, monkeypatch):
    from archivist.serving import graphs as server

    monkeypatch.setattr(server, "MAX_SETUPS", 2)
    server.release_setups()
    closed: list[str] = []
    monkeypatch.setattr(Archivist, "close", lambda self: closed.append(self.settings.chat_model))
    contexts = [
        server.ServerContext(
            ollama_host=ollama.url, home=str(home), stores=[shop_store], chat_model=model
        )
        for model in ("qwen2.5:3b", "qwen2.5:0.5b", "gemma-notools:1b")
    ]
    server.run_setup(contexts[0])
    server.run_setup(contexts[1])
    server.run_setup(contexts[0])  # used again: now the second is the least recent
    server.run_setup(contexts[2])
    assert closed == ["qwen2.5:0.5b"] and len(server._setups) == 2
    server.run_setup(contexts[0])
    assert len(ollama.requests_to("/api/show")) == 3, "the agents kept are not built again"
    monkeypatch.undo()
    server.release_setups()


def test_a_run_failing_for_a_reason_the_user_can_fix_raises_it_worded_with_the_fix(
    graphs, ollama, home, shop_store, no_env_ollama
):
    # LangGraph Server shows a failed run's message for builtin kinds such as RuntimeError
    # only ("An internal error occurred" otherwise): Archivist's errors are of that kind.
    context = {"ollama_host": ollama.url, "home": str(home), "stores": ["nowhere"]}
    with pytest.raises(RuntimeError) as failed:
        served_nodes(graphs["agent"], "refunds?", context)
    assert isinstance(failed.value, ArchivistError)
    assert str(failed.value) == (
        "There is no store named 'nowhere'.\nCreate it with: archivist ingest PATH --store nowhere"
    )
    # Ollama gone once the run's agent is built: the step's failure is worded too.
    context["stores"] = [shop_store]
    assert "call_model" in served_nodes(graphs["agent"], "refunds?", context)
    ollama.stop()
    with pytest.raises(ArchivistError, match=f"Cannot reach Ollama at {ollama.url}"):
        served_nodes(graphs["agent"], "refunds?", context)
