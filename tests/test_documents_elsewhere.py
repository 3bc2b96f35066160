"""The list and read tools where else a store's tools go: someone else's LangChain agent
(`create_agent`), the LangGraph server's agent (chosen by the run's context), and the Python
API a notebook uses."""

from conftest import SHOP
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from test_langgraph_server import graphs, no_env_ollama  # noqa: F401 - fixtures


def test_a_stores_list_and_read_tools_work_in_create_agent(archivist, shop_store):
    tools = [archivist.tool(shop_store), *archivist.document_tools(shop_store)]
    assert [t.name for t in tools] == ["search_shop_docs", "list_shop_docs", "read_shop_docs"]
    agent = create_agent(archivist.ollama.chat_model(), tools)
    result = agent.invoke(
        {"messages": [{"role": "user", "content": "How many documents mention 'voucher'?"}]}
    )
    call = next(m for m in result["messages"] if isinstance(m, AIMessage) and m.tool_calls)
    assert call.tool_calls[0]["name"] == "list_shop_docs"
    assert call.tool_calls[0]["args"] == {"contains": "voucher"}
    reply = next(m for m in result["messages"] if isinstance(m, ToolMessage))
    expected = sorted(f.name for f in SHOP.iterdir() if "voucher" in f.read_text().lower())
    assert [p["source"] for p in reply.artifact] == expected
    assert f'total="{len(expected)}" contains="voucher"' in reply.content
    assert result["messages"][-1].content.startswith(f"{len(expected)} sources contain 'voucher'")


def test_the_served_agent_reads_with_the_tools_its_run_context_asks_for(
    graphs,  # noqa: F811
    ollama,
    tmp_path,
    no_env_ollama,  # noqa: F811
):
    context = {"ollama_host": ollama.url, "home": str(tmp_path / "served")}
    graphs["ingest"].invoke({"paths": [str(SHOP)], "store": "shop_docs"}, context=context)
    agent = graphs["agent"].copy(update={"checkpointer": InMemorySaver()})
    question = {"role": "user", "content": "Summarize warranty.md"}
    state = agent.invoke(
        {"messages": [question]},
        {"configurable": {"thread_id": "t"}},
        context={**context, "stores": ["shop_docs"], "tools": "all"},
    )
    assert [c["name"] for c in state["calls"]] == ["read_shop_docs"]
    assert state["calls"][0]["args"] == {"source": "warranty.md"}
    assert state["calls"][0]["results"][0]["source"] == "warranty.md"
    assert state["messages"][-1].content.endswith("[1]")


def test_the_python_api_lists_and_reads_as_the_cli_does(archivist, shop_store):
    listed = archivist.list_documents(shop_store, contains="RMA-2024")
    assert [(e["source"], e["count"]) for e in listed] == [
        (f.name, f.read_text(encoding="utf-8").count("RMA-2024"))
        for f in sorted(SHOP.iterdir())
        if "RMA-2024" in f.read_text(encoding="utf-8")
    ]
    read = archivist.read_document(shop_store, "returns.md", lines="1-3")
    on_disk = (SHOP / "returns.md").read_text(encoding="utf-8").split("\n")
    assert [(line["n"], line["text"]) for line in read["lines"]] == [
        (n, on_disk[n - 1]) for n in (1, 2, 3)
    ]
    assert read["file_lines"] is True and read["part"] == "lines 1-3"
