"""The chat session: the agent over some stores, one thread in the checkpointer, the last results.

`Conversation` is what the chat loop (archivist.terminal.chat) talks to; it is built on the facade.
"""

import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import HumanMessage, RemoveMessage

from archivist.agent.citations import shown_passages
from archivist.agent.context import MessageTooLong
from archivist.agent.records import ShownPassage, Turn
from archivist.agent.setup import AgentSetup
from archivist.app import Archivist
from archivist.failures import explained
from archivist.tools.errors import StoreNotFound
from archivist.tools.progress import ProgressFn
from archivist.turnlog import logged_turn


def new_thread_id() -> str:
    """Make a conversation id short enough to type after --thread."""
    return uuid.uuid4().hex[:12]


class Conversation:
    """A chat: the agent over some stores, one thread in the checkpointer, the last results."""

    def __init__(
        self,
        archivist: Archivist,
        stores: Sequence[str],
        checkpointer,
        model: str | None = None,
        think: bool | None = None,
        thread_id: str | None = None,
        grade: bool | None = None,
    ) -> None:
        self.archivist = archivist
        self.checkpointer = checkpointer
        self.think = think
        self.grade = grade
        self.setup = self._build(list(stores), model)
        self.thread_id = thread_id or new_thread_id()
        self.last_turn: Turn | None = None

    def _build(self, stores: list[str], model: str | None) -> AgentSetup:
        with explained(self.archivist.settings):
            return self.archivist.agent(
                stores, model, checkpointer=self.checkpointer, think=self.think, grade=self.grade
            )

    @property
    def config(self) -> dict[str, Any]:
        """The graph config that addresses this conversation's thread."""
        return {"configurable": {"thread_id": self.thread_id}}

    def messages(self) -> list[Any]:
        """Return the messages kept for this conversation so far."""
        return self.setup.graph.get_state(self.config).values.get("messages", [])

    def answer(self, question: str, on_event: ProgressFn) -> Turn:
        """Answer in this conversation, streaming progress to `on_event`; log the turn."""
        log = self.archivist.turn_log
        refused = False
        try:
            with explained(self.archivist.settings):
                result = logged_turn(log, "chat", self.setup, question, self.thread_id, on_event)
        except MessageTooLong:
            refused = True
            raise
        except ValueError:
            self._raise_if_a_store_is_gone()
            raise
        finally:
            self._settle_thread(forget_question=refused)
        self.last_turn = result
        return result

    def _raise_if_a_store_is_gone(self) -> None:
        """Name a store deleted while the chat was open (the engine says only that a
        collection is not found)."""
        for name in self.setup.stores:
            if not self.archivist.store(name, must_exist=False).exists():
                raise StoreNotFound(
                    f"Store '{name}' was deleted while this chat was open.",
                    f"Ingest it again (archivist ingest PATH --store {name}), or start the "
                    "chat with other stores (--store NAME).",
                ) from None

    def _settle_thread(self, forget_question: bool = False) -> None:
        """After a stopped or failed turn, drop its unfinished steps from the thread.

        Otherwise the next question would resume them (a search half done) instead of
        starting a turn of its own. What was said stays; a tool call left without its result
        is skipped when the history is sent (archivist.agent.context.complete_tool_calls).
        With `forget_question`, a question refused as too long for the context goes too:
        kept, it would weigh on every later turn (a pasted megabyte, cut again each time).
        """
        graph = self.setup.graph
        state = graph.get_state(self.config)
        messages = state.values.get("messages", [])
        if forget_question and state.next and messages and isinstance(messages[-1], HumanMessage):
            # Written as the step that refused it (still pending), then settled below.
            removal = {"messages": [RemoveMessage(id=messages[-1].id)]}
            graph.update_state(self.config, removal, as_node=state.next[0])
            state = graph.get_state(self.config)
        if state.next:
            graph.update_state(self.config, None, as_node="__end__")

    def new(self) -> str:
        """Start a new conversation; return its id."""
        self.thread_id = new_thread_id()
        self.last_turn = None
        return self.thread_id

    def switch_model(self, name: str) -> list[str]:
        """Use another chat model from now on, re-probing what it can do."""
        self.setup = self._build(self.setup.stores, name)
        return self.setup.notices

    def describe(self) -> str:
        """Say which model, mode, stores and thread this chat uses."""
        setup = self.setup
        thinking = " · thinking" if setup.thinking else ""
        grading = " · grading" if setup.grade else ""
        reranker = self.archivist.settings.rerank_model
        reranking = f" · reranked by {reranker}" if reranker else ""
        window = f"{setup.window.num_ctx}-token context · " if setup.window else ""
        return (
            f"{setup.model} · {setup.mode}{thinking}{grading}{reranking} · {window}"
            f"stores: {', '.join(setup.stores)} · thread {self.thread_id}"
        )

    def stores(self) -> list[dict[str, Any]]:
        """List all stores, marking those this chat searches."""
        return [{**s, "in_use": s["store"] in self.setup.stores} for s in self.archivist.stores()]

    def sources(self) -> list[ShownPassage]:
        """Return the last answered turn's search results, in citation order, each cited one
        with the sentences the answer used (agent.citations.used_sentences)."""
        turn = self.last_turn
        if turn is None:
            return []
        results = [r for call in turn["tool_calls"] for r in call["results"]]
        return shown_passages(results, turn["answer"], [c["n"] for c in turn["citations"]])
