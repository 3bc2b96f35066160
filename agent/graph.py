"""The agent graphs: a tool-calling loop, and retrieve-then-answer for models without tools.

The steps live in archivist.agent.steps; here they are wired, once: `add_agent` and
`add_retrieve_then_answer` add them to a builder, for these graphs and the served one.
"""

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from archivist.agent.context import Window
from archivist.agent.followup import Condenser
from archivist.agent.grading import Grader
from archivist.agent.state import AgentState
from archivist.agent.steps import AgentSteps, Prompter, RetrieveThenAnswer

Step = Callable[..., dict[str, Any]]
"""A graph step: a function of the state (and the run's runtime) returning an update."""


def build_agent(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    max_steps: int = 6,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
    condenser: Condenser | None = None,
) -> CompiledStateGraph:
    """Build the tool-calling agent: the model calls tools until it answers.

    After `max_steps` rounds of tool calls, a further request is refused and the model is asked
    to answer from what it has. With a `window`, every request is fitted into it (see
    agent.context) and what was left out becomes a note. With a `grader`, a `grade` node sits
    between the searches and the model: it drops passages the grader finds irrelevant, searches
    again with rewritten queries where nothing survived, and orders what is left. A follow-up's
    search that copies the user's words carries the conversation's subject: made standalone by
    the `condenser`'s model, else by its rule (archivist.agent.followup).
    """
    prompter = Prompter(system_prompt, window, tools)
    steps = AgentSteps(model, tools, prompter, max_steps, grader, condenser)
    return agent_graph(steps, checkpointer)


def agent_graph(steps: AgentSteps, checkpointer: Checkpointer = None) -> CompiledStateGraph:
    """Wire the tool-calling agent's steps (with a `grade` node when they have a grader)."""
    builder = StateGraph(AgentState)
    builder.add_edge(START, "call_model")
    add_agent(builder, steps, steps.grade if steps.grader is not None else None)
    return builder.compile(name="agent", checkpointer=checkpointer)


def add_agent(builder: StateGraph, steps: Any, grade: Step | None = None) -> None:
    """Add the tool-calling loop to `builder`, entered at `call_model`.

    `steps` has the steps of AgentSteps (call_model, route, run_tools, stop_searching). With
    a `grade` step, the searches waiting for grading go to it, then back to the model.
    """
    builder.add_node(steps.call_model)
    builder.add_node(steps.run_tools)
    builder.add_node(steps.stop_searching)
    builder.add_conditional_edges("call_model", steps.route, ["run_tools", "stop_searching", END])
    _searched(builder, "run_tools", grade, "call_model")
    builder.add_edge("stop_searching", END)


def build_retrieve_then_answer(
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    system_prompt: str,
    checkpointer: Checkpointer = None,
    window: Window | None = None,
    grader: Grader | None = None,
    condenser: Condenser | None = None,
) -> CompiledStateGraph:
    """Build the graph for models without tool calling: search every store, then answer.

    The passages travel inside the question's request, which is fitted into the `window` like
    the agent's; the conversation keeps the plain question. With a `grader`, a `grade` node
    drops irrelevant passages and, when nothing relevant was found in any store, rewrites the
    question into new searches, giving a model without tools a second chance. A follow-up is
    searched as a standalone question (see build_agent).
    """
    steps = RetrieveThenAnswer(model, tools, Prompter(system_prompt, window), grader, condenser)
    return retrieve_then_answer_graph(steps, checkpointer)


def retrieve_then_answer_graph(
    steps: RetrieveThenAnswer, checkpointer: Checkpointer = None
) -> CompiledStateGraph:
    """Wire the retrieve-then-answer steps (with a `grade` node when they have a grader)."""
    builder = StateGraph(AgentState)
    builder.add_edge(START, "retrieve")
    add_retrieve_then_answer(builder, steps, steps.grade if steps.grader is not None else None)
    return builder.compile(name="retrieve_then_answer", checkpointer=checkpointer)


def add_retrieve_then_answer(builder: StateGraph, steps: Any, grade: Step | None = None) -> None:
    """Add retrieve-then-answer to `builder`, entered at `retrieve`.

    `steps` has the steps of RetrieveThenAnswer (retrieve, answer). With a `grade` step, the
    searches waiting for grading go to it before the answer.
    """
    builder.add_node(steps.retrieve)
    builder.add_node(steps.answer)
    _searched(builder, "retrieve", grade, "answer")
    builder.add_edge("answer", END)


def _searched(builder: StateGraph, search: str, grade: Step | None, then: str) -> None:
    """Route a search step to `then`, through the grade step while searches wait for it."""
    if grade is None:
        builder.add_edge(search, then)
        return
    builder.add_node(grade)
    graded = grade.__name__

    def route(state: AgentState) -> str:
        # Only a step with a grader leaves searches waiting (a served run may not grade).
        return graded if state.get("ungraded") else then

    builder.add_conditional_edges(search, route, [graded, then])
    builder.add_edge(graded, then)
