"""Tool arguments a model gets wrong: every one becomes an error observation on the wire that
the model can correct, never an exception. Unknown keys (`k`, filters) are refused rather than
ignored, so a model never believes it filtered or widened a search it did not."""

from langchain_core.messages import ToolMessage

from archivist.agent.graph import build_agent
from archivist.agent.retrieval import make_retrieval_tool
from archivist.agent.state import turn_input
from archivist.ollama import Ollama
from archivist.tools.store import KnowledgeStore

BAD_ARGUMENTS = [
    ({"query": "refund", "k": 1_000_000}, "k\n  Extra inputs are not permitted"),
    ({"query": "refund", "filter": {"year": 2020}}, "filter\n  Extra inputs are not permitted"),
    ({"query": 42}, "query\n  Input should be a valid string"),
    ({"query": None}, "query\n  Input should be a valid string"),
    ({"query": "refund", "source": ["a.md", "b.md"]}, "source\n  Input should be a valid string"),
    ({"query": "x" * 5000}, "query\n  String should have at most 1000 characters"),
]


def test_bad_tool_arguments_become_observations_the_model_can_correct(
    archivist, shop_store, settings, ollama
):
    calls = [
        {"tool_calls": [{"name": "search_shop_docs", "arguments": a}]} for a, _ in BAD_ARGUMENTS
    ]
    good = {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund"}}]}
    ollama.script("qwen2.5:3b", *calls, good, {"content": "Thirty days [1]."})
    tool = make_retrieval_tool(KnowledgeStore(archivist._client, shop_store), archivist.embeddings)
    graph = build_agent(Ollama(settings).chat_model(), [tool], "system", max_steps=10)
    state = graph.invoke(turn_input("refund?"))

    replies = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.status for m in replies] == ["error"] * len(BAD_ARGUMENTS) + ["success"]
    requests = ollama.requests_to("/api/chat")
    for n, (_, expected) in enumerate(BAD_ARGUMENTS, start=1):
        # What the model read back, exactly as sent: the error and what to do about it.
        sent = requests[n]["messages"][-1]
        assert sent["role"] == "tool"
        assert sent["content"].startswith("Error: 1 validation error for SearchArgs\n")
        assert expected in sent["content"]
        assert sent["content"].endswith(
            "Call search_shop_docs again with corrected arguments. "
            "Its arguments: search_shop_docs(query: string, source?: string)."
        )
    assert '<result n="1" source="refund.md"' in requests[-1]["messages"][-1]["content"]
    assert state["messages"][-1].content == "Thirty days [1]."
    assert [c.get("error") is None for c in state["calls"]] == [False] * 6 + [True]
