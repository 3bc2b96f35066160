"""The agent graphs: a tool-calling loop, and retrieve-then-answer for models without tools."""

import time
from collections.abc import Sequence
from typing import Annotated, Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.types import Checkpointer
from pydantic import ValidationError

from agent import prompts
from agent.context import Window, fit_messages, message_tokens, tools_tokens
from tools.errors import ArchivistError
from tools.retrieval import format_results

TOOL_EVENT = "archivist_tool"
"""Custom callback event sent as each tool call finishes, with its record."""
NOTE_EVENT = "archivist_note"
"""Custom callback event sent when something was left out to fit the context, with the note."""


def _per_turn(old: list | None, new: list | None) -> list:
    """Accumulate within a turn; a turn starts by sending None."""
    return [] if new is None else [*(old or []), *new]


class AgentState(MessagesState):
    steps: int
    """Model calls made in this turn."""
    calls: Annotated[list[dict[str, Any]], _per_turn]
    """This turn's tool calls: name, arguments, numbered results, latency, error."""
    notes: Annotated[list[str], _per_turn]
    """This turn's notes to the user: what was left out to fit the context window."""


def _emit(name: str, data: Any) -> None:
    """Tell the callbacks (the chat's view) about progress inside a node."""
    dispatch_custom_event(name, data)


class _Prompter:
    """Build requests that fit the context window, reporting what was left out."""

    def __init__(
        self, system_prompt: str, window: Window | None, tools: Sequence[BaseTool] = ()
    ) -> None:
        self.system = SystemMessage(system_prompt)
        self.window = window
        fixed = message_tokens(self.system)
        fixed += tools_tokens([convert_to_openai_tool(t) for t in tools])
        self.limit = None if window is None else window.prompt - fixed

    def __call__(self, messages: Sequence[BaseMessage]) -> tuple[list[BaseMessage], list[str]]:
        fitted = fit_messages(messages, self.limit, self.window.num_ctx if self.window else 0)
        for note in fitted.notes:
            _emit(NOTE_EVENT, note)
        return [self.system, *fitted.messages], fitted.notes

    def answer_notes(self, response: AIMessage) -> list[str]:
        """Say so when the answer was cut at its share of the window."""
        if response.response_metadata.get("done_reason") != "length" or self.window is None:
            return []
        note = f"The answer reached its limit of {self.window.answer} tokens and was cut."
        _emit(NOTE_EVENT, note)
        return [note]


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
    window: Window | None = None,
):
    """Build the tool-calling agent: the model calls tools until it answers.

    After `max_steps` rounds of tool calls, a further request is refused and the model is asked
    to answer from what it has. With a `window`, every request is fitted into it (see
    agent.context) and what was left out becomes a note.
    """
    by_name = {tool.name: tool for tool in tools}
    with_tools = model.bind_tools(list(tools))
    prompt = _Prompter(system_prompt, window, tools)

    def call_model(state: AgentState) -> dict[str, Any]:
        messages, notes = prompt(state["messages"])
        response = with_tools.invoke(messages)
        notes += prompt.answer_notes(response)
        return {"messages": [response], "steps": state.get("steps", 0) + 1, "notes": notes}

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
            _emit(TOOL_EVENT, record)
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
        messages, notes = prompt([*state["messages"], *replies])
        response = model.invoke(messages)
        notes += prompt.answer_notes(response)
        return {"messages": [*replies, response], "notes": notes}

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
    window: Window | None = None,
):
    """Build the graph for models without tool calling: search every store, then answer.

    The passages travel inside the question's request, which is fitted into the `window` like
    the agent's; the conversation keeps the plain question.
    """
    prompt = _Prompter(system_prompt, window)

    def retrieve(state: AgentState) -> dict[str, Any]:
        question = state["messages"][-1].content
        calls = []
        for tool in tools:
            record, _ = run_tool(tool, {"query": question}, _numbered(calls) + 1)
            calls.append(record)
            _emit(TOOL_EVENT, record)
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
        messages, notes = prompt([*history, request])
        response = model.invoke(messages)
        notes += prompt.answer_notes(response)
        return {"messages": [response], "steps": 1, "notes": notes}

    builder = StateGraph(AgentState)
    builder.add_node(retrieve)
    builder.add_node(answer)
    builder.add_edge(START, "retrieve")
    builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="retrieve_then_answer", checkpointer=checkpointer)


def turn_input(question: str) -> dict[str, Any]:
    """Return the graph input that starts a new turn with `question`."""
    return {"messages": [HumanMessage(question)], "steps": 0, "calls": None, "notes": None}
