"""The agent graphs' steps called alone, without a graph, a model or Ollama."""

import copy

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import StructuredTool
from langgraph.graph import END

from archivist.agent import search_tool as search_tools
from archivist.agent.records import ToolCall
from archivist.agent.retrieval import SearchResult
from archivist.agent.state import turn_input
from archivist.agent.steps import AgentSteps, Prompter, graded_reply, run_tool, search_rounds
from archivist.tools.search import SearchRequest


def passage(n: int, chunk: str) -> dict:
    return {
        "rank": n,
        "score": 1 / n,
        "source": f"{chunk}.md",
        "chunk_id": chunk,
        "text": f"text of {chunk}",
        "metadata": {},
    }


def search_tool(found: list[dict]) -> StructuredTool:
    def search(query: str) -> tuple[str, list[dict]]:
        return f"found {len(found)}", found

    return StructuredTool.from_function(
        search, name="search_docs", description="docs", response_format="content_and_artifact"
    )


def store_tool(found: list[dict]) -> StructuredTool:
    """A store's search tool (numbered passages, a SearchResult) that always finds `found`."""

    def search(query: str, request: SearchRequest) -> SearchResult:
        return SearchResult(query, request, found)

    return search_tools.search_tool("search_docs", "docs", search, SearchRequest())


def state_after(*calls: dict, steps: int = 1, earlier: list | None = None) -> dict:
    asked = AIMessage("", tool_calls=[{**c, "id": f"c{i}"} for i, c in enumerate(calls)])
    return {**turn_input("refund?"), "messages": [HumanMessage("refund?"), asked], "steps": steps,
            "calls": earlier or []}  # fmt: skip


def steps(tools=(), max_steps: int = 6, grader=None) -> AgentSteps:
    # No model: these steps never call one.
    return AgentSteps(None, list(tools), Prompter("system", None), max_steps, grader)


def test_run_tools_answers_an_unknown_tool_with_the_tools_there_are():
    update = steps([search_tool([])]).run_tools(
        state_after({"name": "search_elsewhere", "args": {"query": "refund"}})
    )
    [reply] = update["messages"]
    assert isinstance(reply, ToolMessage) and reply.status == "error"
    assert reply.content == (
        "Error: there is no tool search_elsewhere. The tools are: search_docs(query: string). "
        "Call one of them with its arguments."
    )
    assert update["calls"] == [
        {
            "name": "search_elsewhere",
            "args": {"query": "refund"},
            "results": [],
            "error": "unknown tool",
            "latency_ms": 0.0,
        }
    ]


def test_run_tools_numbers_passages_after_those_of_earlier_searches():
    earlier: list[ToolCall] = [
        {"name": "search_docs", "args": {"query": "x"}, "results": [passage(1, "a")]}
    ]
    tool = store_tool([passage(1, "b"), passage(2, "c")])
    update = steps([tool]).run_tools(
        state_after({"name": "search_docs", "args": {"query": "refund"}}, earlier=earlier)
    )
    [call] = update["calls"]
    assert [r["n"] for r in call["results"]] == [2, 3]
    assert '<result n="2" source="b.md"' in update["messages"][0].content


def test_with_a_grader_run_tools_leaves_the_searches_to_the_grade_step():
    update = steps([store_tool([passage(1, "a")])], grader=object()).run_tools(
        state_after({"name": "search_docs", "args": {"query": "refund"}})
    )
    assert set(update) == {"ungraded"}
    [waiting] = update["ungraded"]
    assert waiting["request"]["id"] == "c0" and waiting["record"]["results"][0]["n"] == 1


def test_route_refuses_tool_calls_past_the_step_limit():
    asking = {"name": "search_docs", "args": {"query": "refund"}}
    agent = steps(max_steps=2)
    assert agent.route(state_after(asking, steps=2)) == "run_tools"
    assert agent.route(state_after(asking, steps=3)) == "stop_searching"
    answered = {**state_after(asking), "messages": [HumanMessage("q"), AIMessage("It is so.")]}
    assert agent.route(answered) == END


class MissingGrader:
    """Finds nothing relevant and proposes no new search."""

    max_rewrites = 2

    def grade(self, question, call):
        return {**call, "grades": [], "kept": []}, [
            {"kind": "grade", "input_tokens": 1, "output_tokens": 1, "ms": 1.0}
        ]

    def rewrite(self, question, tried):
        usage = {"kind": "rewrite", "input_tokens": 1, "output_tokens": 1, "ms": 1.0}
        return [], {**usage, "error": "no JSON"}


def test_search_rounds_build_new_records_and_leave_the_searches_given_unchanged():
    first, _ = run_tool(store_tool([passage(1, "a")]), {"query": "refund"}, 1)
    given = copy.deepcopy(first)
    records, used = search_rounds(MissingGrader(), [first], [], "refund?", 2)
    assert first == given
    [record] = records
    assert record["kept"] == [] and record["rewrite_error"] == "no JSON"
    assert [u["kind"] for u in used] == ["grade", "rewrite"]
    text, cut, shown = graded_reply(records, {}, None)
    assert '"refund"' in text and cut == 0
    assert shown == [{**record, "shown": []}] and "shown" not in record


class Replies:
    """A chat model that answers each request with the next scripted message."""

    def __init__(self, *replies: AIMessage) -> None:
        self.replies = list(replies)
        self.bound: list = []

    def bind_tools(self, tools):
        self.bound = tools
        return self

    def invoke(self, messages):
        return self.replies.pop(0)


WRITTEN = '<tool_call>\n{"name": "search_docs", "arguments": {"query": "refund"}}\n</tool_call>'


def test_call_model_runs_a_call_the_model_wrote_as_text_and_run_tools_marks_it():
    model = Replies(AIMessage(f"I will look that up.\n{WRITTEN}"))
    agent = AgentSteps(model, [store_tool([passage(1, "a")])], Prompter("system", None))
    update = agent.call_model(turn_input("refund?"))
    [response] = update["messages"]
    assert response.content == "I will look that up."
    [request] = response.tool_calls
    assert (request["name"], request["args"]) == ("search_docs", {"query": "refund"})
    assert update["notes"] == []

    state = {**turn_input("refund?"), "messages": [HumanMessage("refund?"), response],
             "calls": []}  # fmt: skip
    [call] = agent.run_tools(state)["calls"]
    assert call["from_text"] is True and [r["n"] for r in call["results"]] == [1]


def test_call_model_leaves_a_call_to_no_offered_tool_unrun_and_says_why():
    model = Replies(AIMessage('{"name": "web_search", "arguments": {"query": "refund"}}'))
    agent = AgentSteps(model, [search_tool([])], Prompter("system", None))
    update = agent.call_model(turn_input("refund?"))
    [response] = update["messages"]
    assert response.content == "" and response.tool_calls == []
    assert update["notes"] == [
        "The model wrote a call to web_search as text; it was not run because no offered tool "
        "is named web_search. The tools are search_docs(query: string)."
    ]


def test_stop_searching_keeps_thinking_written_into_the_answer_out_of_it():
    model = Replies(AIMessage("<think>Enough found.</think>\nThirty days [1]."))
    agent = AgentSteps(model, [search_tool([])], Prompter("system", None), max_steps=1)
    update = agent.stop_searching(
        state_after({"name": "search_docs", "args": {"query": "refund"}}, steps=2)
    )
    answer = update["messages"][-1]
    assert answer.content == "Thirty days [1]."
    assert answer.additional_kwargs["reasoning_content"] == "Enough found."
