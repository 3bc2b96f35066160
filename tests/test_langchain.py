"""A store in someone else's LangChain agent: as a tool and as a retriever, inside langchain's
own `create_agent`, against the fake Ollama (the scripted model calls tools by name)."""

import pytest
from conftest import write_files
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.retrievers import BaseRetriever
from langchain_core.tools import ToolException, create_retriever_tool
from langchain_tests.integration_tests import RetrieversIntegrationTests
from pydantic import ValidationError

from archivist.agent.langchain import StoreRetriever
from archivist.agent.retrieval import format_results
from archivist.ollama import Ollama
from archivist.tools.errors import ArchivistError

QUERY = "Within how many days can I request a refund"


def trajectory(result: dict) -> list[tuple[str, object]]:
    """The agent's steps: tool calls made, tool results returned, the answer."""
    steps = []
    for message in result["messages"][1:]:
        if isinstance(message, AIMessage) and message.tool_calls:
            steps += [("call", (c["name"], c["args"])) for c in message.tool_calls]
        elif isinstance(message, ToolMessage):
            steps.append(("result", (message.name, message.content)))
        else:
            steps.append(("answer", message.content))
    return steps


def test_a_stores_tool_works_in_create_agent(archivist, shop_store):
    agent = create_agent(Ollama(archivist.settings).chat_model(), [archivist.tool(shop_store)])
    result = agent.invoke({"messages": [{"role": "user", "content": QUERY + "?"}]})

    expected = archivist.search(QUERY, shop_store)
    steps = trajectory(result)
    assert steps[0] == ("call", ("search_shop_docs", {"query": QUERY}))
    assert steps[1] == (
        "result",
        ("search_shop_docs", format_results("search_shop_docs", QUERY, expected)),
    )
    kind, answer = steps[2]
    assert kind == "answer" and "30 days" in answer and answer.endswith("[1]")
    assert result["messages"][2].artifact == expected


def test_a_stores_retriever_works_in_create_agent(archivist, shop_store, tmp_path):
    write_files(tmp_path / "gear", {"tents.md": "The Ridgeline tent is waterproof to 3000 mm."})
    archivist.ingest([str(tmp_path / "gear")], "gear", description="tent specifications")
    lookup = create_retriever_tool(
        archivist.retriever("gear", k=2),
        "lookup_gear",
        "Look up tent specifications and gear data.",
    )
    # Both kinds side by side: the fake model picks the tool whose words match the question.
    agent = create_agent(
        Ollama(archivist.settings).chat_model(), [archivist.tool(shop_store), lookup]
    )
    question = "Is the Ridgeline tent waterproof"
    steps = trajectory(agent.invoke({"messages": [{"role": "user", "content": question}]}))
    assert steps[0] == ("call", ("lookup_gear", {"query": question}))
    assert steps[1] == ("result", ("lookup_gear", "The Ridgeline tent is waterproof to 3000 mm."))
    assert steps[2][0] == "answer"


def test_the_retriever_returns_the_tools_passages_as_documents(archivist, shop_store):
    retriever = archivist.retriever(shop_store, k=3)
    assert isinstance(retriever, BaseRetriever)
    documents = retriever.invoke(QUERY)
    expected = archivist.search(QUERY, shop_store, k=3)
    assert [d.page_content for d in documents] == [r["text"] for r in expected]
    assert [d.id for d in documents] == [r["chunk_id"] for r in expected]
    first = documents[0].metadata
    assert (first["source"], first["rank"], first["score"]) == (
        "refund.md",
        1,
        expected[0]["score"],
    )

    scoped = archivist.retriever(shop_store, source="returns.md").invoke("refund")
    assert scoped and {d.metadata["source"] for d in scoped} == {"returns.md"}
    with pytest.raises(ToolException, match="No source in 'shop_docs' matches 'nothing.md'"):
        archivist.retriever(shop_store, source="nothing.md").invoke("refund")


def test_a_retriever_call_sets_its_own_search_options(archivist, shop_store, ollama):
    retriever = archivist.retriever(shop_store, k=3)
    assert len(retriever.invoke(QUERY)) == 3
    assert len(retriever.invoke(QUERY, k=1)) == 1
    assert len(retriever.invoke(QUERY)) == 3  # a call's options are its own
    scoped = retriever.invoke("refund", k=2, source="returns.md")
    assert len(scoped) == 2 and {d.metadata["source"] for d in scoped} == {"returns.md"}
    ollama.clear_requests()
    sparse = retriever.invoke(QUERY, mode="sparse")
    expected = archivist.search(QUERY, shop_store, k=3, mode="sparse")
    assert [d.id for d in sparse] == [r["chunk_id"] for r in expected]
    assert not ollama.requests_to("/api/embed")  # a sparse search embeds nothing

    diverse = StoreRetriever(tool=archivist.tool(shop_store), k=4, mmr=0.2).invoke(QUERY)
    assert [d.id for d in diverse] == [
        r["chunk_id"] for r in archivist.search(QUERY, shop_store, k=4, mmr=0.2)
    ]


def test_a_retriever_refuses_what_it_does_not_know(archivist, shop_store):
    tool = archivist.tool(shop_store)
    with pytest.raises(ValidationError, match="top_k"):
        StoreRetriever(tool=tool, top_k=3)
    assert len(StoreRetriever(tool=tool, k=2).invoke(QUERY)) == 2
    retriever = StoreRetriever(tool=tool)
    with pytest.raises(ArchivistError, match="Unknown search option: top_k") as refused:
        retriever.invoke(QUERY, top_k=1)
    assert "k, mode, source, min_score, mmr" in refused.value.fix
    with pytest.raises(ArchivistError, match="Unknown mode 'fuzzy'"):
        retriever.invoke(QUERY, mode="fuzzy")
    with pytest.raises(ArchivistError, match="has no reranker: it cannot rerank with m:1b"):
        retriever.invoke(QUERY, rerank="m:1b")


class TestStoreRetrieverStandard(RetrieversIntegrationTests):
    """LangChain's own checks of a retriever, on a store's."""

    pytestmark = pytest.mark.anyio

    @pytest.fixture(autouse=True)
    def _tool(self, archivist, shop_store):
        self.tool = archivist.tool(shop_store)

    @pytest.fixture
    def anyio_backend(self):
        return "asyncio"

    @property
    def retriever_constructor(self) -> type[StoreRetriever]:
        return StoreRetriever

    @property
    def retriever_constructor_params(self) -> dict:
        return {"tool": self.tool}

    @property
    def retriever_query_example(self) -> str:
        return QUERY
