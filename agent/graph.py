"""The agent graphs: a tool-calling loop, and retrieve-then-answer for models without tools."""

import time
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import BaseTool, ToolException
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Checkpointer
from pydantic import ValidationError

from agent import prompts
from tools.errors import ArchivistError
from tools.retrieval import format_results


def _turn_calls(old: list[dict] | None, new: list[dict] | None) -> list[dict]:
    """Accumulate this turn's tool calls; a turn starts by sending None."""
    return [] if new is None else [*(old or []), *new]


class AgentState(MessagesState):
    steps: int
    """Model calls made in this turn."""
    calls: Annotated[list[dict[str, Any]], _turn_calls]
    """This turn's tool calls: name, arguments, numbered results, latency, error."""


def run_tool(tool: BaseTool, args: dict[str, Any], first: int) -> tuple[dict[str, Any], str]:
    """Run a retrieval tool; return its call record and the text the model sees.

    Results are numbered from `first`, so numbers stay unique across a turn's searches and
    `[n]` citations point at one passage. Bad arguments become an error the model can read.
    """
    started = time.perf_counter()
    record: dict[str, Any] = {"name": tool.name, "args": args, "results": []}
    try:
        message = tool.invoke({"name": tool.name, "args": args, "id": "call", "type": "tool_call"})
    except (ValidationError, ToolException, ArchivistError) as exc:
        record["error"] = str(exc)
        content = f"Error: {exc}\nCall {tool.name} again with corrected arguments."
    else:
        results = [{**r, "n": n} for n, r in enumerate(message.artifact or [], start=first)]
        record["results"] = results
        content = format_results(
            tool.name,
            str(args.get("query", "")),
            results,
            start=first,
            source=args.get("source") or None,
        )
    record["latency_ms"] = round((time.perf_counter() - started) * 1000, 1)
    return record, content


def _numbered(calls: Sequence[dict[str, Any]]) -> int:
    return sum(len(c["results"]) for c in calls)


def build_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    max_steps: int = 6,
    checkpointer: Checkpointer = None,
):
    """Build the tool-calling agent: the model calls tools until it answers.

    After `max_steps` rounds of tool calls, a further request is refused and the model is asked
    to answer from what it has.
    """
    by_name = {tool.name: tool for tool in tools}
    with_tools = model.bind_tools(list(tools))

    def call_model(state: AgentState) -> dict[str, Any]:
        response = with_tools.invoke([SystemMessage(system_prompt), *state["messages"]])
        return {"messages": [response], "steps": state.get("steps", 0) + 1}

    def run_tools(state: AgentState) -> dict[str, Any]:
        calls: list[dict[str, Any]] = []
        replies = []
        for call in state["messages"][-1].tool_calls:
            tool = by_name.get(call["name"])
            if tool is None:
                record = {
                    "name": call["name"],
                    "args": call["args"],
                    "results": [],
                    "error": "unknown tool",
                    "latency_ms": 0.0,
                }
                content = (
                    f"Error: there is no tool {call['name']}. Use one of: {', '.join(by_name)}."
                )
            else:
                record, content = run_tool(
                    tool, call["args"], _numbered(state["calls"] + calls) + 1
                )
            calls.append(record)
            replies.append(
                ToolMessage(
                    content,
                    tool_call_id=call["id"],
                    name=call["name"],
                    status="error" if "error" in record else "success",
                )
            )
        return {"messages": replies, "calls": calls}

    def stop_searching(state: AgentState) -> dict[str, Any]:
        replies = [
            ToolMessage(
                prompts.STEP_LIMIT, tool_call_id=call["id"], name=call["name"], status="error"
            )
            for call in state["messages"][-1].tool_calls
        ]
        messages = [SystemMessage(system_prompt), *state["messages"], *replies]
        return {"messages": [*replies, model.invoke(messages)]}

    def route(state: AgentState) -> str:
        last = state["messages"][-1]
        if not isinstance(last, AIMessage) or not last.tool_calls:
            return END
        return "run_tools" if state["steps"] <= max_steps else "stop_searching"

    builder = StateGraph(AgentState)
    builder.add_node(call_model)
    builder.add_node(run_tools)
    builder.add_node(stop_searching)
    builder.add_edge(START, "call_model")
    builder.add_conditional_edges("call_model", route, ["run_tools", "stop_searching", END])
    builder.add_edge("run_tools", "call_model")
    builder.add_edge("stop_searching", END)
    return builder.compile(name="agent", checkpointer=checkpointer)


def build_retrieve_then_answer(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    checkpointer: Checkpointer = None,
):
    """Build the graph for models without tool calling: search every store, then answer."""

    def retrieve(state: AgentState) -> dict[str, Any]:
        question = state["messages"][-1].content
        calls = []
        for tool in tools:
            record, _ = run_tool(tool, {"query": question}, _numbered(calls) + 1)
            calls.append(record)
        return {"calls": calls}

    def answer(state: AgentState) -> dict[str, Any]:
        *history, question = state["messages"]
        context = "\n\n".join(
            format_results(
                c["name"],
                c["args"]["query"],
                c["results"],
                start=c["results"][0]["n"] if c["results"] else 1,
            )
            for c in state["calls"]
        )
        request = HumanMessage(
            prompts.ANSWER_REQUEST.format(context=context, question=question.content)
        )
        response = model.invoke([SystemMessage(system_prompt), *history, request])
        return {"messages": [response], "steps": 1}

    builder = StateGraph(AgentState)
    builder.add_node(retrieve)
    builder.add_node(answer)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="retrieve_then_answer", checkpointer=checkpointer)


def turn_input(question: str) -> dict[str, Any]:
    """Return the graph input that starts a new turn with `question`."""
    return {"messages": [HumanMessage(question)], "steps": 0, "calls": None}
