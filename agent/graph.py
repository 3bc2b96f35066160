"""The agent graphs: a tool-calling loop, and retrieve-then-answer for models without tools.

The steps live in archivist.agent.steps; here they are wired.
"""

from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from archivist.agent.context import Window
from archivist.agent.grading import Grader
from archivist.agent.state import AgentState
from archivist.agent.steps import AgentSteps, Prompter, RetrieveThenAnswer


def build_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    max_steps: int = 6,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
) -> CompiledStateGraph:
    """Build the tool-calling agent: the model calls tools until it answers.

    After `max_steps` rounds of tool calls, a further request is refused and the model is asked
    to answer from what it has. With a `window`, every request is fitted into it (see
    agent.context) and what was left out becomes a note. With a `grader`, a `grade` node sits
    between the searches and the model: it drops passages the grader finds irrelevant, searches
    again with rewritten queries where nothing survived, and orders what is left.
    """
    steps = AgentSteps(model, tools, Prompter(system_prompt, window, tools), max_steps, grader)
    return agent_graph(steps, checkpointer)


def agent_graph(steps: AgentSteps, checkpointer: Checkpointer = None) -> CompiledStateGraph:
    """Wire the tool-calling agent's steps (with a `grade` node when they have a grader)."""
    searched = "run_tools" if steps.grader is None else "grade"

    builder = StateGraph(AgentState)
    builder.add_node(steps.call_model)
    builder.add_node(steps.run_tools)
    builder.add_node(steps.stop_searching)
    builder.add_edge(START, "call_model")
    builder.add_conditional_edges("call_model", steps.route, ["run_tools", "stop_searching", END])
    if steps.grader is not None:
        builder.add_node(steps.grade)
        builder.add_edge("run_tools", "grade")
    builder.add_edge(searched, "call_model")
    builder.add_edge("stop_searching", END)
    return builder.compile(name="agent", checkpointer=checkpointer)


def build_retrieve_then_answer(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
) -> CompiledStateGraph:
    """Build the graph for models without tool calling: search every store, then answer.

    The passages travel inside the question's request, which is fitted into the `window` like
    the agent's; the conversation keeps the plain question. With a `grader`, a `grade` node
    drops irrelevant passages and, when nothing relevant was found in any store, rewrites the
    question into new searches, giving a model without tools a second chance.
    """
    steps = RetrieveThenAnswer(model, tools, Prompter(system_prompt, window), grader)
    return retrieve_then_answer_graph(steps, checkpointer)


def retrieve_then_answer_graph(
    steps: RetrieveThenAnswer, checkpointer: Checkpointer = None
) -> CompiledStateGraph:
    """Wire the retrieve-then-answer steps (with a `grade` node when they have a grader)."""
    searched = "retrieve" if steps.grader is None else "grade"

    builder = StateGraph(AgentState)
    builder.add_node(steps.retrieve)
    builder.add_node(steps.answer)
    builder.add_edge(START, "retrieve")
    if steps.grader is not None:
        builder.add_node(steps.grade)
        builder.add_edge("retrieve", "grade")
    builder.add_edge(searched, "answer")
    builder.add_edge("answer", END)
    return builder.compile(name="retrieve_then_answer", checkpointer=checkpointer)
