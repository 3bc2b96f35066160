"""The chat's conversation, built in a background thread while the prompt already takes input.

Building it imports LangChain, LangGraph and the store and opens them (about two seconds of
CPU); the prompt needs none of that. `Starting` runs the build in a thread and keeps what the
build says (a notice, the banner) for the main thread, which shows it as it comes: above the
prompt (archivist.terminal.screen) or while a question waits for the build. A build that fails ends
the chat with its error, as a build before the prompt would have: the main thread raises it.
"""

import contextvars
import threading
from collections.abc import Callable
from typing import Any

from archivist.agent.records import ShownPassage, Turn
from archivist.terminal.chat import Conversation, StartFailed
from archivist.tools.progress import ProgressFn

Build = Callable[[Callable[[str], None]], tuple[Conversation, list[str]]]
"""Build the conversation, saying things on the way; return it and what to say once ready."""


class Starting:
    """A conversation being built in a background thread; each call waits until it is."""

    def __init__(self, build: Build, say: Callable[[str], None]) -> None:
        self._build = build
        self._say = say
        self._changed = threading.Condition()
        self._lines: list[str] = []
        self._done = False
        self._conversation: Conversation | None = None
        self._error: BaseException | None = None
        self._wakers: list[Callable[[], None]] = []
        # The build runs in a copy of the command's context (the command line's settings).
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._run,), name="chat-start", daemon=True
        )

    def start(self) -> None:
        """Start building."""
        self._thread.start()

    def join(self) -> None:
        """Wait until the build is over, so the store is not closed while it opens."""
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            conversation, lines = self._build(self._heard)
        except BaseException as exc:  # kept for the main thread, which ends the chat with it
            self._finish(None, [], exc)
        else:
            self._finish(conversation, lines, None)

    def _heard(self, line: str) -> None:
        with self._changed:
            self._lines.append(line)
        self._wake()

    def _finish(
        self, conversation: Conversation | None, lines: list[str], error: BaseException | None
    ) -> None:
        with self._changed:
            self._conversation, self._error = conversation, error
            self._lines += lines
            self._done = True
        self._wake()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()
            wakers = list(self._wakers)
        for wake in wakers:
            wake()

    @property
    def settled(self) -> bool:
        """Whether the build is over and all it said has been shown."""
        with self._changed:
            return self._done and not self._lines and self._error is None

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Have `wake` called, from any thread, when the build says something or ends (at once
        if it already has); return the unsubscribe."""
        with self._changed:
            self._wakers.append(wake)
            pending = bool(self._lines) or self._done
        if pending:
            wake()

        def unsubscribe() -> None:
            with self._changed:
                self._wakers.remove(wake)

        return unsubscribe

    def show(self) -> None:
        """Show what the build has said so far; raise StartFailed if it failed."""
        with self._changed:
            lines, self._lines = self._lines, []
            error = self._error
        for line in lines:
            self._say(line)
        if error is not None:
            raise StartFailed(error)

    def ready(self) -> Conversation:
        """Wait for the conversation, showing what the build says meanwhile; return it."""
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._done or self._lines)
                done = self._done
            self.show()
            if done:
                assert self._conversation is not None
                return self._conversation

    def answer(self, question: str, on_event: ProgressFn) -> Turn:
        """Answer once the conversation is built."""
        return self.ready().answer(question, on_event)

    def new(self) -> str:
        """Start a new conversation once built."""
        return self.ready().new()

    def switch_model(self, name: str) -> list[str]:
        """Switch the model once built."""
        return self.ready().switch_model(name)

    def describe(self) -> str:
        """Describe the conversation once built."""
        return self.ready().describe()

    def stores(self) -> list[dict[str, Any]]:
        """List the stores once built."""
        return self.ready().stores()

    def sources(self) -> list[ShownPassage]:
        """Return the last search results once built."""
        return self.ready().sources()
