"""langgraph.json: both graphs load as LangGraph Server loads them, and run from their context."""

import importlib.util
import json
import sys

import pytest
from conftest import ROOT, SHOP
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
    sent = ollama.requests_to("/api/chat")[-2]["messages"]
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
