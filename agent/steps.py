"""The agent graphs' steps: methods of two small classes that hold their collaborators.

`AgentSteps` is the tool-calling loop (call_model → run_tools → [grade] → call_model, or
stop_searching at the step limit); `RetrieveThenAnswer` serves models without tool calling
(retrieve → [grade] → answer). Each step takes the graph state and returns a partial update,
so a test can call one alone. The graphs are wired in archivist.agent.graph.
"""

import time
from collections.abc import Sequence
from functools import cached_property
from typing import Any

from langchain_core.callbacks import dispatch_custom_event
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables.config import ensure_config, get_callback_manager_for_config
from langchain_core.tools import BaseTool, ToolException
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.graph import END
from pydantic import ValidationError

from archivist.agent import prompts
from archivist.agent.context import (
    Window,
    fit_messages,
    message_tokens,
    question_of,
    tools_tokens,
    turn_start,
)
from archivist.agent.documents import (
    described_call,
    is_document_tool,
    planned_calls,
    render_reply,
    takes_turn,
)
from archivist.agent.followup import Condenser, copies, history_of
from archivist.agent.grading import Grader, assemble
from archivist.agent.records import (
    Condensing,
    ModelCall,
    Passage,
    Reranking,
    Rewriting,
    Showing,
    ToolCall,
    with_step,
)
from archivist.agent.retrieval import SearchResult, format_results
from archivist.agent.search_tool import search_config
from archivist.agent.state import AgentState, Ungraded
from archivist.agent.textcalls import describe_tools, recovered_ids, settle, turn_results
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import CHANNEL, Event, Note, Searched
from archivist.tools.words import count


def _emit(event: Event) -> None:
    """Tell the callbacks (the chat's view) about progress inside a node.

    A step called alone, outside a graph run (a unit test), has no one to tell.
    """
    if get_callback_manager_for_config(ensure_config()).parent_run_id is not None:
        dispatch_custom_event(CHANNEL, event)


class Prompter:
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
        """Return the request for `messages` (system prompt first) and the notes on it."""
        fitted = fit_messages(messages, self.limit, self.window.num_ctx if self.window else 0)
        for note in fitted.notes:
            _emit(Note(note))
        return [self.system, *fitted.messages], fitted.notes

    def room(self, messages: Sequence[BaseMessage]) -> int | None:
        """Tokens left in the prompt after the current turn's messages (None: no window)."""
        if self.limit is None:
            return None
        current = messages[turn_start(messages) :]
        return max(self.limit - sum(message_tokens(m) for m in current), 0)

    def answer_notes(self, response: AIMessage) -> list[str]:
        """Say so when the answer was cut at its share of the window."""
        if response.response_metadata.get("done_reason") != "length" or self.window is None:
            return []
        note = f"The answer reached its limit of {self.window.answer} tokens and was cut."
        _emit(Note(note))
        return [note]

    def cut_note(self, cut: int) -> list[str]:
        """Say so when passages of this turn's searches were left out to fit the window."""
        if not cut or self.window is None:
            return []
        note = (
            f"To fit the {self.window.num_ctx}-token context window: left out the "
            f"{count(cut, 'least relevant passage')} of this turn's search results."
        )
        _emit(Note(note))
        return [note]


def run_tool(
    tool: BaseTool,
    args: dict[str, Any],
    first: int,
    budget: int | None = None,
    turn: Sequence[Passage] = (),
) -> tuple[ToolCall, str]:
    """Run a store's tool; return its call record and the text the model sees.

    Results are numbered from `first`, so numbers stay unique across a turn's searches and
    `[n]` citations point at one passage. Bad arguments become an error the model can read.
    A list or read shows a page of at most `budget` tokens, and a read may start around one
    of the `turn`'s passages (archivist.agent.documents).
    """
    started = time.perf_counter()
    outcome: dict[str, Any]
    sent = {**args, "turn": list(turn)} if takes_turn(tool) else args
    call = {"name": tool.name, "args": sent, "id": "call", "type": "tool_call"}
    try:
        message = tool.invoke(call, search_config(first))
    except (ValidationError, ToolException, ArchivistError) as exc:
        outcome = {"results": [], "error": str(exc)}
        content = f"Error: {exc}\nCall {tool.name} again with corrected arguments."
        if isinstance(exc, ValidationError):
            content += f" Its arguments: {describe_tools(schemas([tool]))}."
    else:
        rendered = render_reply(message.artifact, first, budget)
        if rendered is not None:
            content, shown = rendered
            outcome = {"results": [{**r, "n": n} for n, r in enumerate(shown, start=first)]}
        else:
            found: SearchResult = message.artifact
            results = [{**r, "n": n} for n, r in enumerate(found, start=first)]
            outcome = {"results": results}
            if found.reranked_by is not None:
                outcome |= reranking(found)
            content = message.content
    latency_ms = round((time.perf_counter() - started) * 1000, 1)
    record: ToolCall = {"name": tool.name, "args": args, **outcome, "latency_ms": latency_ms}
    return record, content


def reranking(found: SearchResult) -> Reranking:
    """The reranking step's record of a reranked search: what it cost, and by which model."""
    return Reranking(rerank_ms=found.rerank_ms or 0.0, rerank_model=found.reranked_by or "")


def unknown_tool(
    name: str, args: dict[str, Any], known: Sequence[BaseTool]
) -> tuple[ToolCall, str]:
    """Record a call of a tool that does not exist; tell the model which ones do, and how."""
    record: ToolCall = {
        "name": name,
        "args": args,
        "results": [],
        "error": "unknown tool",
        "latency_ms": 0.0,
    }
    content = (
        f"Error: there is no tool {name}. The tools are: {describe_tools(schemas(known))}. "
        "Call one of them with its arguments."
    )
    return record, content


def schemas(tools: Sequence[BaseTool]) -> dict[str, dict[str, Any]]:
    """The tools' argument schemas, by name, as the model is shown them."""
    return {t.name: convert_to_openai_tool(t)["function"]["parameters"] for t in tools}


def settled(
    response: AIMessage, tools: Sequence[BaseTool], quoted: Sequence[str] = ()
) -> tuple[AIMessage, list[str]]:
    """Recover calls the model wrote as text and separate its thinking (agent.textcalls);
    return the message to keep and notes on written calls that could not be run. Calls the
    `quoted` tool results hold too are a document's, never run."""
    response, notes = settle(response, schemas(tools), quoted)
    for note in notes:
        _emit(Note(note))
    return response, notes


def numbered(calls: Sequence[ToolCall]) -> int:
    """Count the passages numbered so far in a turn's calls."""
    return sum(len(c["results"]) for c in calls)


def _shown(calls: Sequence[ToolCall]) -> dict[str, int]:
    """Chunk ids the model was already shown this turn, with their numbers."""
    by_n = {r["n"]: r for c in calls for r in c["results"]}
    return {
        by_n[n]["chunk_id"]: n
        for c in calls
        for n in c.get("shown", [r["n"] for r in c["results"]])
        if n in by_n
    }


def _kept(call: ToolCall) -> list[Passage]:
    kept = set(call.get("kept", ()))
    return [r for r in call["results"] if r["n"] in kept]


def search_rounds(
    grader: Grader, first: list[ToolCall], tools: Sequence[BaseTool], question: str, next_n: int
) -> tuple[list[ToolCall], list[ModelCall]]:
    """Grade the `first` searches (one per tool), then search again while all missed.

    At most `grader.max_rewrites` rounds; each asks the model for better queries (one, or one
    per fact) and runs them on every tool. Returns every search's record and the model calls.
    """
    records: list[ToolCall] = []
    used: list[ModelCall] = []
    for call in first:
        grading, cost = grader.grade(question, call)
        graded = with_step(call, grading)
        used += cost
        records.append(graded)
        _emit(Searched(graded))
    latest = len(first)  # how many records the last round added
    tried = list(dict.fromkeys(str(r["args"].get("query", "")) for r in first))
    # A rewrite changes the words only: other arguments (a source filter) stay.
    kept_args = {r["name"]: {k: v for k, v in r["args"].items() if k != "query"} for r in first}
    for _ in range(grader.max_rewrites):
        if any(r.get("kept") for r in records[len(records) - latest :]):
            break
        queries, usage = grader.rewrite(question, tried)
        used.append(usage)
        if not queries:
            reason = usage.get("error", "no new query was proposed")
            records[-1] = with_step(records[-1], Rewriting(rewrite_error=reason))
            break
        previous, latest = tried[-1], 0
        for query in queries:
            for tool in tools:
                args = {**kept_args.get(tool.name, {}), "query": query}
                record, _ = run_tool(tool, args, next_n)
                next_n += len(record["results"])
                record = with_step(record, Rewriting(rewritten_from=previous))
                if "error" not in record:
                    grading, cost = grader.grade(question, record)
                    record = with_step(record, grading)
                    used += cost
                records.append(record)
                latest += 1
                _emit(Searched(record))
        tried += queries
    return records, used


def graded_reply(
    records: Sequence[ToolCall], shown: dict[str, int], budget: int | None
) -> tuple[str, int, list[ToolCall]]:
    """Write what the model reads for one graded tool call.

    Returns the text, the passages cut to fit `budget`, and the records with what each showed.
    Missed rounds are named, then the relevant passages of the last round, most relevant
    first and last; if none survived, the model is told to say the knowledge base lacks it.
    """
    if not any(r.get("kept") for r in records):
        tried = ", ".join(f'"{r["args"].get("query", "")}"' for r in records)
        content = prompts.NOTHING_RELEVANT.format(tool=records[0]["name"], tried=tried)
        return content, 0, [with_step(r, Showing(shown=[])) for r in records]
    lines = [
        f'No passage found for "{r["args"].get("query", "")}" is relevant to the question.'
        for r in records
        if not r.get("kept")
    ]
    cut = 0
    repeats: dict[int, int] = {}
    found = [r for r in records if r.get("kept")]
    share = None if budget is None else budget // len(found)
    showed: list[ToolCall] = []
    for record in records:
        if not record.get("kept"):
            showed.append(with_step(record, Showing(shown=[])))
            continue
        query = str(record["args"].get("query", ""))
        source = record["args"].get("source") or None

        def render(passages, name=record["name"], query=query, source=source):
            return format_results(name, query, passages, source=source)

        chosen = assemble(_kept(record), shown, share, render)
        showed.append(with_step(record, Showing(shown=[r["n"] for r in chosen.passages])))
        cut += chosen.cut
        repeats |= chosen.repeats
        if "rewritten_from" in record:
            lines.append(f'Searched again for "{query}":')
        lines.append(render(chosen.passages))
    if repeats:
        pairs = ", ".join(f"[{n}] is [{earlier}]" for n, earlier in repeats.items())
        lines.append(prompts.REPEATED.format(pairs=pairs))
    return "\n".join(lines), cut, showed


def standalone_question(condenser: Condenser, state: AgentState) -> tuple[str, dict[str, Any]]:
    """This turn's question as a search needs it, and the state update that keeps it.

    Without history it is the question itself, at no cost; with history, the condenser makes
    it standalone once a turn (archivist.agent.followup) and the state keeps the result.
    """
    if state.get("standalone"):
        return state["standalone"], {}
    question = question_of(state["messages"])
    earlier, answer = history_of(state["messages"])
    if not earlier:
        return question, {}
    standalone, used = condenser.standalone(question, earlier, answer)
    return standalone, {"standalone": standalone, "grader_calls": used}


def after_model(state: AgentState, max_steps: int) -> str:
    """Name the step after the model's reply: run_tools, stop_searching (past `max_steps`
    rounds of tool calls), or END when it answered."""
    # No messages at all: the thread's only question was refused and taken back out of it.
    last = state["messages"][-1] if state["messages"] else None
    if not isinstance(last, AIMessage) or not last.tool_calls:
        return END
    return "run_tools" if state["steps"] <= max_steps else "stop_searching"


def _reply(request: dict[str, Any], record: ToolCall, content: str) -> ToolMessage:
    return ToolMessage(
        content,
        tool_call_id=request["id"],
        name=request["name"],
        status="error" if "error" in record else "success",
    )


class AgentSteps:
    """The tool-calling agent's steps, over a model, its tools and a context window.

    After `max_steps` rounds of tool calls a further request is refused and the model is asked
    to answer from what it has. With a `grader`, the searches wait for the `grade` step.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        prompter: Prompter,
        max_steps: int = 6,
        grader: Grader | None = None,
        condenser: Condenser | None = None,
    ) -> None:
        self.model = model
        self.tools = {tool.name: tool for tool in tools}
        self.prompter = prompter
        self.max_steps = max_steps
        self.grader = grader
        self.condenser = condenser or Condenser()

    @cached_property
    def with_tools(self):
        """The model bound to the tools (bound on first use)."""
        return self.model.bind_tools(list(self.tools.values()))

    def call_model(self, state: AgentState) -> dict[str, Any]:
        """Ask the model for its next move: tool calls, or the answer."""
        messages, notes = self.prompter(state["messages"])
        response, written = settled(
            self.with_tools.invoke(messages),
            list(self.tools.values()),
            turn_results(state["messages"]),
        )
        notes += written + self.prompter.answer_notes(response)
        return {"messages": [response], "steps": state.get("steps", 0) + 1, "notes": notes}

    def route(self, state: AgentState) -> str:
        """Run the model's tool calls, refuse them at the step limit, or end with the answer."""
        return after_model(state, self.max_steps)

    def run_tools(self, state: AgentState) -> dict[str, Any]:
        """Run the model's tool calls; with grading, hand the searches to the grade step.

        A search that copies the user's words, in a turn with history, runs with the
        standalone question instead (archivist.agent.followup), and its record keeps the
        words it was asked with in `condensed_from`.
        """
        calls: list[ToolCall] = []
        pending: list[Ungraded] = []
        replies = []
        kept: dict[str, Any] = {}
        question = question_of(state["messages"])
        written = recovered_ids(state["messages"][-1])
        room = self.prompter.room(state["messages"])
        budget = None if room is None else room // 2
        done: list[ToolCall] = []  # calls answered here even with grading (lists, reads)
        for request in state["messages"][-1].tool_calls:
            tool = self.tools.get(request["name"])
            args = request["args"]
            if tool is None:
                known = list(self.tools.values())
                record, content = unknown_tool(request["name"], args, known)
            else:
                query = args.get("query")
                asked = None
                if isinstance(query, str) and copies(query, question):
                    standalone, more = standalone_question(self.condenser, {**state, **kept})
                    kept |= more
                    if standalone != question:
                        asked, args = query, {**args, "query": standalone}
                first = numbered([*state["calls"], *calls]) + 1
                turn = [r for c in [*state["calls"], *calls] for r in c["results"]]
                record, content = run_tool(tool, args, first, budget, turn)
                if asked is not None:
                    record = with_step(record, Condensing(condensed_from=asked))
            if request["id"] in written:
                record = {**record, "from_text": True}
            calls.append(record)
            if self.grader is not None and (tool is None or not is_document_tool(tool)):
                pending.append({"request": request, "record": record, "content": content})
                continue  # the grade step reports and answers it
            done.append(record)
            _emit(Searched(record))
            replies.append(_reply(request, record, content))
        if self.grader is not None:
            # Lists and reads are answered now; the searches wait for the grade step.
            answered = {"messages": replies, "calls": done} if done else {}
            return {"ungraded": pending, **answered, **kept}
        return {"messages": replies, "calls": calls, **kept}

    def grade(self, state: AgentState) -> dict[str, Any]:
        """Grade the waiting searches, search again where all missed, answer each tool call."""
        pending = state["ungraded"]
        # A follow-up is graded as the standalone question: alone, "and how do I make it
        # optional?" makes every passage look irrelevant.
        question, kept = standalone_question(self.condenser, state)
        shown = _shown(state["calls"])
        next_n = numbered([*state["calls"], *(p["record"] for p in pending)]) + 1
        room = self.prompter.room(state["messages"])
        searched = sum(1 for p in pending if "error" not in p["record"])
        budget = None if room is None else room // max(searched, 1)
        calls: list[ToolCall] = []
        replies: list[ToolMessage] = []
        used: list[ModelCall] = []
        cut = 0
        for item in pending:
            request, record = item["request"], item["record"]
            if "error" in record:
                calls.append(record)
                _emit(Searched(record))
                replies.append(_reply(request, record, item["content"]))
                continue
            tool = self.tools[request["name"]]
            records, cost = search_rounds(self.grader, [record], [tool], question, next_n)
            next_n += numbered(records[1:])
            content, dropped, records = graded_reply(records, shown, budget)
            calls += records
            used += cost
            cut += dropped
            replies.append(_reply(request, record, content))
        notes = self.prompter.cut_note(cut)
        return {
            **kept,
            "messages": replies,
            "calls": calls,
            "grader_calls": [*kept.get("grader_calls", []), *used],
            "ungraded": [],
            "notes": notes,
        }

    def stop_searching(self, state: AgentState) -> dict[str, Any]:
        """Refuse the tool calls past the step limit; ask for the answer from what was found."""
        replies = [
            ToolMessage(
                prompts.STEP_LIMIT, tool_call_id=call["id"], name=call["name"], status="error"
            )
            for call in state["messages"][-1].tool_calls
        ]
        messages, notes = self.prompter([*state["messages"], *replies])
        response, written = settled(self.model.invoke(messages), ())
        notes += written + self.prompter.answer_notes(response)
        return {"messages": [*replies, response], "notes": notes}


class RetrieveThenAnswer:
    """Steps for a model without tool calling: search every store, then answer.

    The passages travel inside the question's request; the conversation keeps the plain
    question. With a `grader`, irrelevant passages are dropped and, when nothing relevant was
    found in any store, the question is rewritten into new searches.
    """

    def __init__(
        self,
        model: BaseChatModel,
        tools: Sequence[BaseTool],
        prompter: Prompter,
        grader: Grader | None = None,
        condenser: Condenser | None = None,
        documents: Sequence[BaseTool] = (),
    ) -> None:
        self.model = model
        self.tools = list(tools)
        self.prompter = prompter
        self.grader = grader
        self.condenser = condenser or Condenser()
        self.documents = list(documents)
        """The stores' list and read tools, run for the questions that ask for them."""

    def read_first(self, question: str) -> list[ToolCall]:
        """The lists and reads a question asks for (which or how many documents mention a
        text, a summary of a named document), run as a model would call them; the passages
        they show are all kept for the answer. Calls that find nothing are left out."""
        calls: list[ToolCall] = []
        limit = self.prompter.limit
        budget = None if limit is None else limit // 2
        for tool, args in planned_calls(question, self.documents):
            record, _ = run_tool(tool, args, numbered(calls) + 1, budget)
            if "error" in record or not record["results"]:
                continue
            record = {**record, "kept": [r["n"] for r in record["results"]]}
            calls.append(record)
            _emit(Searched(record))
        return calls

    def retrieve(self, state: AgentState) -> dict[str, Any]:
        """Search every store with the question (a follow-up: made standalone first)."""
        question = question_of(state["messages"])
        query, kept = standalone_question(self.condenser, state)
        read = self.read_first(query) if self.documents else []
        calls: list[ToolCall] = []
        for tool in self.tools:
            record, _ = run_tool(tool, {"query": query}, numbered([*read, *calls]) + 1)
            if query != question:
                record = with_step(record, Condensing(condensed_from=question))
            calls.append(record)
            if self.grader is None:
                _emit(Searched(record))
        if self.grader is not None:
            done = {"calls": read} if read else {}
            return {"ungraded": [{"record": record} for record in calls], **done, **kept}
        return {"calls": [*read, *calls], **kept}

    def graded_context(
        self, calls: Sequence[ToolCall], question: str
    ) -> tuple[str, list[int], int]:
        """The relevant passages of every search, deduplicated, best first and last, within
        the room the question leaves; returns the text, the numbers shown, the passages cut."""
        kept = sorted(
            (r for c in calls for r in _kept(c)), key=lambda r: (r["rank"], -r["score"], r["n"])
        )
        names = ", ".join(dict.fromkeys(c["name"] for c in calls))
        if not kept:
            tried = ", ".join(dict.fromkeys(f'"{c["args"].get("query", "")}"' for c in calls))
            return prompts.NOTHING_RELEVANT.format(tool=names, tried=tried), [], 0
        request = HumanMessage(prompts.ANSWER_REQUEST.format(context="", question=question))
        limit = self.prompter.limit
        budget = None if limit is None else limit - message_tokens(request)

        def render(passages):
            return format_results(names, question, passages)

        chosen = assemble(kept, {}, budget, render)
        return render(chosen.passages), [r["n"] for r in chosen.passages], chosen.cut

    def grade(self, state: AgentState) -> dict[str, Any]:
        """Grade the searches, search again while all missed; record what the answer shows."""
        first = [item["record"] for item in state["ungraded"]]
        question, _ = standalone_question(self.condenser, state)
        next_n = numbered([*state["calls"], *first]) + 1  # after any list or read's
        records, used = search_rounds(self.grader, first, self.tools, question, next_n)
        _, shown, _ = self.graded_context(records, question)
        showed: list[ToolCall] = [
            with_step(r, Showing(shown=[n for n in shown if n in {p["n"] for p in r["results"]}]))
            for r in records
        ]
        return {"calls": showed, "grader_calls": used, "ungraded": []}

    def answer(self, state: AgentState) -> dict[str, Any]:
        """Answer the question from the passages found."""
        *history, question = state["messages"]
        notes: list[str] = []
        if self.grader is not None:
            context, _, cut = self.graded_context(state["calls"], str(question.content))
            notes += self.prompter.cut_note(cut)
        else:
            context = "\n\n".join(
                format_results(
                    c["name"],
                    c["args"].get("query") or described_call(c),
                    c["results"],
                    start=c["results"][0]["n"] if c["results"] else 1,
                )
                for c in state["calls"]
            )
        request = HumanMessage(
            prompts.ANSWER_REQUEST.format(context=context, question=question.content)
        )
        messages, fitted = self.prompter([*history, request])
        response, written = settled(self.model.invoke(messages), ())
        notes += fitted + written + self.prompter.answer_notes(response)
        return {"messages": [response], "steps": 1, "notes": notes}
