"""Choose how to answer with a model: the agent or retrieve-then-answer, thinking, grading,
the context window and the system prompt naming the stores.

The query engine decides from what it is handed (the model's capabilities, the tools, a
factory of chat models); it never reads settings or talks to Ollama itself.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.tools import BaseTool
from langgraph.graph.state import CompiledStateGraph
from langgraph.types import Checkpointer

from archivist.agent import prompts
from archivist.agent.context import Window, window_for
from archivist.agent.followup import Condenser
from archivist.agent.grading import Grader
from archivist.agent.graph import agent_graph, retrieve_then_answer_graph
from archivist.agent.records import ModelInfo
from archivist.agent.steps import AgentSteps, Prompter, RetrieveThenAnswer

AGENT = "agent"
RETRIEVE_THEN_ANSWER = "retrieve-then-answer"


class ChatModelFactory(Protocol):
    """Build the chat model for a window, thinking on, off or (None) not sent."""

    def __call__(
        self, *, num_ctx: int, num_predict: int, reasoning: bool | None
    ) -> BaseChatModel: ...


class StoreTool(NamedTuple):
    """A store's retrieval tool, and what the system prompt says the store holds."""

    tool: BaseTool
    about: str
    documents: tuple[BaseTool, ...] = ()
    """Its list and read tools, when the model is given them (`--tools all`)."""


@dataclass
class AgentSetup:
    """A compiled agent graph and what the user should know about it."""

    graph: CompiledStateGraph
    mode: str
    """AGENT or RETRIEVE_THEN_ANSWER."""
    model: str
    stores: list[str]
    info: ModelInfo | None = None
    """What Ollama said of the model (None for a graph built by hand)."""
    window: Window | None = None
    thinking: bool = False
    """Whether the model is asked to think before answering."""
    notices: list[str] = field(default_factory=list)
    """Things to tell the user once (the mode, an ignored --think)."""
    grade: bool = False
    """Whether retrieved passages are graded (and missed searches rewritten)."""
    steps: AgentSteps | RetrieveThenAnswer | None = None
    """The graph's steps with their collaborators (None for a graph built by hand)."""


def build_setup(
    info: ModelInfo,
    stores: Sequence[str],
    tools: Sequence[StoreTool],
    chat_model: ChatModelFactory,
    *,
    num_ctx: int,
    max_steps: int = 6,
    max_rewrites: int = 2,
    checkpointer: Checkpointer = None,
    think: bool | None = None,
    grade: bool = False,
    retrieve_first: bool = False,
) -> AgentSetup:
    """Build the agent for `stores` in the model's best mode, sized to its context.

    The window is the model's context length, at most `num_ctx`. With `grade`, the same model
    grades what each search returned and rewrites searches that found nothing relevant; it
    does so without thinking, since a verdict list needs no reasoning and thinking would
    multiply its cost. With `retrieve_first`, a model that can call tools is still served
    retrieve-then-answer, for one that does not search by itself.
    """
    window = window_for(info.context_length, num_ctx)
    notices = []
    # Only a model that can think is sent `think`; Ollama refuses it to the others.
    reasoning = None
    if info.thinking:
        reasoning = True if think is None else think
    elif think:
        notices.append(f"{info.name} has no thinking mode; it answers without one.")

    def sized(reasoning: bool | None) -> BaseChatModel:
        return chat_model(num_ctx=window.num_ctx, num_predict=window.answer, reasoning=reasoning)

    chat = sized(reasoning)
    # Grades and standalone questions are structured output: a thinking model makes them with
    # thinking off.
    plain = sized(False) if reasoning else chat
    grader = Grader(plain, max_rewrites) if grade else None
    condenser = Condenser(plain)
    described = "\n".join(f"- {t.tool.name}: {t.about}" for t in tools)
    searches = [t.tool for t in tools]
    documents = [d for t in tools for d in t.documents]
    steps: AgentSteps | RetrieveThenAnswer
    if info.tools and not retrieve_first:
        system = prompts.AGENT_SYSTEM.format(stores=described)
        if documents:
            system += prompts.DOCUMENTS_HOW
        offered = [*searches, *documents]
        prompter = Prompter(system, window, offered)
        steps = AgentSteps(chat, offered, prompter, max_steps, grader, condenser)
        graph = agent_graph(steps, checkpointer)
        mode = AGENT
    else:
        prompter = Prompter(prompts.ANSWER_SYSTEM.format(stores=described), window)
        steps = RetrieveThenAnswer(chat, searches, prompter, grader, condenser, documents)
        graph = retrieve_then_answer_graph(steps, checkpointer)
        mode = RETRIEVE_THEN_ANSWER
        if info.tools:
            notices.append(
                f"Retrieve-then-answer: every store is searched before {info.name} answers."
            )
        else:
            notices.append(f"{info.name} cannot call tools: using retrieve-then-answer.")
    return AgentSetup(
        graph, mode, info.name, list(stores), info, window, bool(reasoning), notices, grade, steps
    )
