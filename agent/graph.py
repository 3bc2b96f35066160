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

from archivist.agent import prompts
from archivist.agent.context import Window, fit_messages, message_tokens, tools_tokens
from archivist.agent.grading import Grader, assemble
from archivist.agent.retrieval import format_results
from archivist.agent.textcalls import describe_tools, recovered_ids, settle
from archivist.tools.errors import ArchivistError

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
    """This turn's tool calls: name, arguments, numbered results, latency, error, and
    `from_text` when the model wrote the call as text."""
    notes: Annotated[list[str], _per_turn]
    """This turn's notes to the user: what was left out to fit the context window."""
    fresh: list[dict[str, Any]]
    """With grading: this step's searches waiting for the grade node (record, reply, call)."""
    aux: Annotated[list[dict[str, Any]], _per_turn]
    """This turn's grading and rewriting model calls: kind, tokens, milliseconds."""


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

    def room(self, messages: Sequence[BaseMessage]) -> int | None:
        """Tokens left in the prompt after the current turn's messages (None: no window)."""
        if self.limit is None:
            return None
        start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)
        return max(self.limit - sum(message_tokens(m) for m in messages[start:]), 0)

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
        if isinstance(exc, ValidationError):
            content += f" Its arguments: {describe_tools(_schemas([tool]))}."
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


def _schemas(tools: Sequence[BaseTool]) -> dict[str, dict[str, Any]]:
    """The tools' argument schemas, by name, as the model is shown them."""
    return {t.name: convert_to_openai_tool(t)["function"]["parameters"] for t in tools}


def _settled(response: AIMessage, tools: Sequence[BaseTool]) -> tuple[AIMessage, list[str]]:
    """Recover calls the model wrote as text and separate its thinking (agent.textcalls)."""
    response, notes = settle(response, _schemas(tools))
    for note in notes:
        _emit(NOTE_EVENT, note)
    return response, notes


def _numbered(calls: Sequence[dict[str, Any]]) -> int:
    return sum(len(c["results"]) for c in calls)


def _question(messages: Sequence[BaseMessage]) -> str:
    """The user's question of the current turn."""
    human = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
    return str(human.content) if human else ""


def _shown(calls: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Chunk ids the model was already shown this turn, with their numbers."""
    by_n = {r["n"]: r for c in calls for r in c["results"]}
    return {
        by_n[n]["chunk_id"]: n
        for c in calls
        for n in c.get("shown", [r["n"] for r in c["results"]])
        if n in by_n
    }


def _kept(record: dict[str, Any]) -> list[dict[str, Any]]:
    kept = set(record.get("kept", ()))
    return [r for r in record["results"] if r["n"] in kept]


class _Rounds:
    """Grade searches; where nothing relevant survived, rewrite the query and search again."""

    def __init__(self, grader: Grader) -> None:
        self.grader = grader

    def run(
        self, first: list[dict[str, Any]], tools: Sequence[BaseTool], question: str, next_n: int
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """Grade the `first` searches (one per tool), then search again while all missed.

        At most `max_rewrites` rounds; each asks the model for better queries (one, or one per
        fact) and runs them on every tool. Returns every search's record and the model calls.
        """
        records: list[dict[str, Any]] = []
        aux: list[dict[str, Any]] = []
        latest = first
        for record in first:
            aux += self.grader.grade(question, record)
            records.append(record)
            _emit(TOOL_EVENT, record)
        tried = list(dict.fromkeys(str(r["args"].get("query", "")) for r in first))
        # A rewrite changes the words only: other arguments (a source filter) stay.
        kept_args = {r["name"]: {k: v for k, v in r["args"].items() if k != "query"} for r in first}
        for _ in range(self.grader.max_rewrites):
            if any(r.get("kept") for r in latest):
                break
            queries, usage = self.grader.rewrite(question, tried)
            aux.append(usage)
            if not queries:
                latest[-1]["rewrite_error"] = usage.get("error", "no new query was proposed")
                break
            previous, latest = tried[-1], []
            for query in queries:
                for tool in tools:
                    args = {**kept_args.get(tool.name, {}), "query": query}
                    record, _ = run_tool(tool, args, next_n)
                    next_n += len(record["results"])
                    record["rewritten_from"] = previous
                    if "error" not in record:
                        aux += self.grader.grade(question, record)
                    records.append(record)
                    latest.append(record)
                    _emit(TOOL_EVENT, record)
            tried += queries
        return records, aux


def _tool_reply(
    records: list[dict[str, Any]], shown: dict[str, int], budget: int | None
) -> tuple[str, int]:
    """Write what the model reads for one graded tool call; return it and the passages cut.

    Missed rounds are named, then the relevant passages of the last round, most relevant
    first and last; if none survived, the model is told to say the knowledge base lacks it.
    """
    found = [r for r in records if r.get("kept")]
    for record in records:
        record["shown"] = []
    if not found:
        tried = ", ".join(f'"{r["args"].get("query", "")}"' for r in records)
        return prompts.NOTHING_RELEVANT.format(tool=records[0]["name"], tried=tried), 0
    lines = [
        f'No passage found for "{r["args"].get("query", "")}" is relevant to the question.'
        for r in records
        if not r.get("kept")
    ]
    cut = 0
    repeats: dict[int, int] = {}
    share = None if budget is None else budget // len(found)
    for record in found:
        query = str(record["args"].get("query", ""))

        def render(passages, name=record["name"], query=query, args=record["args"]):
            return format_results(name, query, passages, source=args.get("source") or None)

        chosen = assemble(_kept(record), shown, share, render)
        record["shown"] = [r["n"] for r in chosen.passages]
        cut += chosen.cut
        repeats |= chosen.repeats
        if "rewritten_from" in record:
            lines.append(f'Searched again for "{query}":')
        lines.append(render(chosen.passages))
    if repeats:
        pairs = ", ".join(f"[{n}] is [{earlier}]" for n, earlier in repeats.items())
        lines.append(prompts.REPEATED.format(pairs=pairs))
    return "\n".join(lines), cut


def _cut_note(cut: int, window: Window | None) -> list[str]:
    if not cut or window is None:
        return []
    note = (
        f"To fit the {window.num_ctx}-token context window: left out the {cut} least relevant "
        "passages of this turn's search results."
    )
    _emit(NOTE_EVENT, note)
    return [note]


def _reply(call: dict[str, Any], record: dict[str, Any], content: str) -> ToolMessage:
    return ToolMessage(
        content,
        tool_call_id=call["id"],
        name=call["name"],
        status="error" if "error" in record else "success",
    )


def build_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    max_steps: int = 6,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
):
    """Build the tool-calling agent: the model calls tools until it answers.

    After `max_steps` rounds of tool calls, a further request is refused and the model is asked
    to answer from what it has. With a `window`, every request is fitted into it (see
    agent.context) and what was left out becomes a note. With a `grader`, a `grade` node sits
    between the searches and the model: it drops passages the grader finds irrelevant, searches
    again with rewritten queries where nothing survived, and orders what is left.
    """
    by_name = {tool.name: tool for tool in tools}
    with_tools = model.bind_tools(list(tools))
    prompt = _Prompter(system_prompt, window, tools)

    def call_model(state: AgentState) -> dict[str, Any]:
        messages, notes = prompt(state["messages"])
        response, written = _settled(with_tools.invoke(messages), tools)
        notes += written + prompt.answer_notes(response)
        return {"messages": [response], "steps": state.get("steps", 0) + 1, "notes": notes}

    rounds = _Rounds(grader) if grader is not None else None

    def run_tools(state: AgentState) -> dict[str, Any]:
        calls: list[dict[str, Any]] = []
        contents: list[str] = []
        replies = []
        written = recovered_ids(state["messages"][-1])
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
                    f"Error: there is no tool {call['name']}. The tools are: "
                    f"{describe_tools(_schemas(tools))}. Call one of them with its arguments."
                )
            else:
                record, content = run_tool(
                    tool, call["args"], _numbered(state["calls"] + calls) + 1
                )
            if call["id"] in written:
                record["from_text"] = True
            contents.append(content)
            calls.append(record)
            if grader is not None:
                continue  # the grade node reports and answers it
            _emit(TOOL_EVENT, record)
            replies.append(_reply(call, record, content))
        if grader is not None:
            pending = [
                {"call": call, "record": record, "content": content}
                for call, record, content in zip(
                    state["messages"][-1].tool_calls, calls, contents, strict=True
                )
            ]
            return {"fresh": pending}
        return {"messages": replies, "calls": calls}

    def grade(state: AgentState) -> dict[str, Any]:
        pending = state["fresh"]
        question = _question(state["messages"])
        shown = _shown(state["calls"])
        next_n = _numbered([*state["calls"], *(p["record"] for p in pending)]) + 1
        room = prompt.room(state["messages"])
        searched = sum(1 for p in pending if "error" not in p["record"])
        budget = None if room is None else room // max(searched, 1)
        calls, replies, aux, cut = [], [], [], 0
        for item in pending:
            call, record = item["call"], dict(item["record"])
            if "error" in record:
                calls.append(record)
                _emit(TOOL_EVENT, record)
                replies.append(_reply(call, record, item["content"]))
                continue
            records, used = rounds.run([record], [by_name[call["name"]]], question, next_n)
            next_n += _numbered(records[1:])
            content, dropped = _tool_reply(records, shown, budget)
            calls += records
            aux += used
            cut += dropped
            replies.append(_reply(call, record, content))
        notes = _cut_note(cut, window)
        return {"messages": replies, "calls": calls, "aux": aux, "fresh": [], "notes": notes}

    def stop_searching(state: AgentState) -> dict[str, Any]:
        replies = [
            ToolMessage(
                prompts.STEP_LIMIT, tool_call_id=call["id"], name=call["name"], status="error"
            )
            for call in state["messages"][-1].tool_calls
        ]
        messages, notes = prompt([*state["messages"], *replies])
        response, written = _settled(model.invoke(messages), ())
        notes += written + prompt.answer_notes(response)
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
    if grader is not None:
        builder.add_node(grade)
        builder.add_edge("run_tools", "grade")
        builder.add_edge("grade", "call_model")
    else:
        builder.add_edge("run_tools", "call_model")
    builder.add_edge("stop_searching", END)
    return builder.compile(name="agent", checkpointer=checkpointer)


def build_retrieve_then_answer(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
):
    """Build the graph for models without tool calling: search every store, then answer.

    The passages travel inside the question's request, which is fitted into the `window` like
    the agent's; the conversation keeps the plain question. With a `grader`, a `grade` node
    drops irrelevant passages and, when nothing relevant was found in any store, rewrites the
    question into new searches, giving a model without tools a second chance.
    """
    prompt = _Prompter(system_prompt, window)
    rounds = _Rounds(grader) if grader is not None else None

    def retrieve(state: AgentState) -> dict[str, Any]:
        question = state["messages"][-1].content
        calls = []
        for tool in tools:
            record, _ = run_tool(tool, {"query": question}, _numbered(calls) + 1)
            calls.append(record)
            if grader is None:
                _emit(TOOL_EVENT, record)
        if grader is not None:
            return {"fresh": [{"record": record} for record in calls]}
        return {"calls": calls}

    def graded_context(calls: list[dict[str, Any]], question: str) -> tuple[str, list[int], int]:
        """The relevant passages of every search, deduplicated, best first and last, within
        the room the question leaves; returns the text, the numbers shown, the passages cut."""
        kept = sorted(
            (r for c in calls for r in _kept(c)), key=lambda r: (r["rank"], -r["score"], r["n"])
        )
        names = ", ".join(dict.fromkeys(c["name"] for c in calls))
        if not kept:
            tried = ", ".join(dict.fromkeys(f'"{c["args"]["query"]}"' for c in calls))
            return prompts.NOTHING_RELEVANT.format(tool=names, tried=tried), [], 0
        request = HumanMessage(prompts.ANSWER_REQUEST.format(context="", question=question))
        budget = None if prompt.limit is None else prompt.limit - message_tokens(request)

        def render(passages):
            return format_results(names, question, passages)

        chosen = assemble(kept, {}, budget, render)
        return render(chosen.passages), [r["n"] for r in chosen.passages], chosen.cut

    def grade(state: AgentState) -> dict[str, Any]:
        first = [dict(item["record"]) for item in state["fresh"]]
        question = _question(state["messages"])
        records, aux = rounds.run(first, tools, question, _numbered(first) + 1)
        _, shown, _ = graded_context(records, question)
        for record in records:
            own = {r["n"] for r in record["results"]}
            record["shown"] = [n for n in shown if n in own]
        return {"calls": records, "aux": aux, "fresh": []}

    def answer(state: AgentState) -> dict[str, Any]:
        *history, question = state["messages"]
        notes: list[str] = []
        if grader is not None:
            context, _, cut = graded_context(state["calls"], str(question.content))
            notes += _cut_note(cut, window)
        else:
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
        messages, fitted = prompt([*history, request])
        response, written = _settled(model.invoke(messages), ())
        notes += fitted + written + prompt.answer_notes(response)
        return {"messages": [response], "steps": 1, "notes": notes}

    builder = StateGraph(AgentState)
    builder.add_node(retrieve)
    builder.add_node(answer)
    builder.add_edge(START, "retrieve")
    if grader is not None:
        builder.add_node(grade)
        builder.add_edge("retrieve", "grade")
        builder.add_edge("grade", "answer")
    else:
        builder.add_edge("retrieve", "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="retrieve_then_answer", checkpointer=checkpointer)


def turn_input(question: str) -> dict[str, Any]:
    """Return the graph input that starts a new turn with `question`."""
    return {
        "messages": [HumanMessage(question)],
        "steps": 0,
        "calls": None,
        "notes": None,
        "fresh": [],
        "aux": None,
    }
