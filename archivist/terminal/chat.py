"""The terminal chat loop: a small function over a conversation, an input and a view.

`chat_loop` knows nothing of terminals or graphs: it reads a line, runs a slash command or
asks the conversation, and tells the view what happened. Tests script all three.
"""

from collections.abc import Callable
from typing import Any, Protocol, TextIO

from archivist.agent.records import ShownPassage, Turn
from archivist.printable import printable, printable_name
from archivist.render import notice_text, place_text, relevance_text, tool_line
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import Event, Note, ProgressFn, Retried, Searched, Thinking, Token
from archivist.tools.words import count

PROMPT = "› "
HELP = """Ask a question, or use a command:
  /help          this help
  /sources       the last search results in full, the sentences the answer used marked
  /stores        the stores, and which ones this chat searches
  /model [NAME]  show the chat model, or switch to another one
  /new           start a new conversation
  /exit          leave (or Ctrl-D); Ctrl-C stops an answer
Esc then Enter adds a line break; pasted text keeps its lines."""


class StartFailed(Exception):
    """The conversation could not be built: the chat ends with `error`."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Conversation(Protocol):
    """What the chat loop asks of the application."""

    def answer(self, question: str, on_event: ProgressFn) -> Turn:
        """Answer a question, reporting progress; return the `ask --json` object."""
        ...

    def new(self) -> str:
        """Start a new conversation; return its thread id."""
        ...

    def switch_model(self, name: str) -> list[str]:
        """Use another chat model from now on; return what the user should know."""
        ...

    def describe(self) -> str:
        """Say which model, mode and thread are in use."""
        ...

    def stores(self) -> list[dict[str, Any]]:
        """List the stores, each with `in_use`."""
        ...

    def sources(self) -> list[ShownPassage]:
        """Return the last turn's search results, numbered, with what the answer used."""
        ...


class View(Protocol):
    """Where the chat loop shows things."""

    def begin(self) -> None: ...
    def event(self, event: Event) -> None: ...
    def finish(self, result: Turn) -> None: ...
    def stopped(self) -> None: ...
    def error(self, message: str) -> None: ...
    def info(self, text: str) -> None: ...
    def notice(self, text: str) -> None: ...
    def sources(self, results: list[ShownPassage]) -> None: ...


def unsearched_line(result: Turn) -> str | None:
    """The dim line under an answer the agent gave without searching, if it did."""
    if result.get("searched", True):
        return None
    # Imported here: the query engine is not loaded until a turn has run
    # (archivist.terminal.starting).
    from archivist.agent.turn import unsearched_note

    return unsearched_note(result["model"], result["stores"])


def sources_line(result: Turn) -> str | None:
    """List the sources an answer cited, if any."""
    if not result["citations"]:
        return None
    return "Sources: " + " · ".join(f"[{c['n']}] {place_text(c)}" for c in result["citations"])


def invalid_line(result: Turn) -> str | None:
    """Warn about citation numbers that no search returned."""
    if not result.get("invalid_citations"):
        return None
    cited = ", ".join(f"[{n}]" for n in result["invalid_citations"])
    return f"Warning: {cited} cited but not retrieved."


def render_answer(result: Turn) -> str:
    """Render a whole turn as text: tool lines, the answer, the cited sources."""
    lines = [tool_line(call) for call in result["tool_calls"]]
    lines.append(printable(result["answer"]))
    lines += [line for line in (sources_line(result), invalid_line(result)) if line]
    return "\n".join(lines)


def stores_text(listing: list[dict[str, Any]]) -> str:
    """Describe the stores, marking those this chat searches."""
    if not listing:
        return "No stores yet. Create one with: archivist ingest PATH --store NAME"
    return (
        "\n".join(
            f"{'*' if s['in_use'] else ' '} {s['store']} ({count(s['chunks'], 'chunk')})"
            + (f": {printable_name(s['description'])}" if s["description"] else "")
            for s in listing
        )
        + "\n(* searched in this chat)"
    )


COMMANDS = ("/help", "/sources", "/stores", "/model", "/new", "/exit", "/quit")


def _is_command(line: str) -> bool:
    """A line starting with `/` is a command, unless it is pasted text of several lines."""
    return line.startswith("/") and ("\n" not in line or line.split()[0] in COMMANDS)


def run_command(line: str, conversation: Conversation, view: View) -> bool:
    """Run a slash command; return False when the chat should end."""
    name, _, argument = line.partition(" ")
    argument = argument.strip()
    if name in ("/exit", "/quit"):
        return False
    if name == "/help":
        view.info(HELP)
    elif name == "/new":
        view.info(f"Started a new conversation (thread {conversation.new()}).")
    elif name == "/sources":
        view.sources(conversation.sources())
    elif name == "/stores":
        view.info(stores_text(conversation.stores()))
    elif name == "/model" and not argument:
        view.info(conversation.describe())
    elif name == "/model":
        for notice in conversation.switch_model(argument):
            view.notice(notice)
        view.info(conversation.describe())
    else:
        view.error(f"Unknown command {name}. Type /help for the commands.")
    return True


def chat_loop(conversation: Conversation, read: Callable[[str], str], view: View) -> int:
    """Read questions and commands until /exit or end of input; return the exit status.

    Ctrl-C at the prompt clears the line; during an answer it stops the answer. A failure
    (Ollama down, a model missing) is shown and the chat goes on; one building the
    conversation (StartFailed) ends it.
    """
    while True:
        try:
            line = read(PROMPT).strip()
        except KeyboardInterrupt:
            continue
        except EOFError:
            return 0
        if not line:
            continue
        try:
            if _is_command(line):
                if not run_command(line, conversation, view):
                    return 0
                continue
            view.begin()
            result = conversation.answer(line, view.event)
        except StartFailed:
            raise
        except KeyboardInterrupt:
            view.stopped()
        except ArchivistError as exc:
            view.error(f"Error: {exc}")
        except Exception as exc:  # an unexpected failure must not end the chat either
            view.error(f"Error: {type(exc).__name__}: {exc}")
        else:
            view.finish(result)


class PlainView:
    """Plain text for pipes and dumb terminals: no colours, no spinners, tokens as they come."""

    def __init__(self, out: TextIO, err: TextIO, show_thinking: bool = False) -> None:
        self.out, self.err = out, err
        self.show_thinking = show_thinking
        self._open = False
        self._streamed = False
        self._thinking = False

    def _write(self, text: str) -> None:
        self.out.write(printable(text))
        self.out.flush()

    def _end_line(self) -> None:
        if self._open:
            self._write("\n")
            self._open = False

    def begin(self) -> None:
        self._open = self._streamed = self._thinking = False

    def event(self, event: Event) -> None:
        match event:
            case Token(text=text):
                if self._thinking:
                    self._end_line()
                    self._thinking = False
                self._write(text)
                self._open = self._streamed = True
            case Thinking(text=text) if self.show_thinking:
                if not self._thinking:
                    self._end_line()
                    self._write("Thinking: ")
                    self._thinking = True
                self._write(text)
                self._open = True
            case Searched(call=call):
                self._end_line()
                self._write(tool_line(call) + "\n")
            case Note() | Retried():
                self._end_line()
                self.err.write(printable(f"Note: {notice_text(event)}\n"))
                self.err.flush()

    def finish(self, result: Turn) -> None:
        if self._thinking or not self._streamed:
            self._end_line()
            self._write(result["answer"])
            self._open = True
        self._end_line()
        for line in (sources_line(result), invalid_line(result), unsearched_line(result)):
            if line:
                self._write(line + "\n")

    def stopped(self) -> None:
        self._end_line()
        self._write("(stopped)\n")

    def error(self, message: str) -> None:
        self._end_line()
        self.err.write(printable(message) + "\n")
        self.err.flush()

    def info(self, text: str) -> None:
        self._end_line()
        self._write(text + "\n")

    def notice(self, text: str) -> None:
        """Notices go to stderr, so a pipe's stdout holds only answers and asked-for output."""
        self._end_line()
        self.err.write(text + "\n")
        self.err.flush()

    def sources(self, results: list[ShownPassage]) -> None:
        self._end_line()
        if not results:
            self._write("No search results yet in this conversation.\n")
        for r in results:
            cited = " · cited" if r["cited"] else ""
            self._write(f"[{r['n']}] {place_text(r)}{relevance_text(r)}{cited}\n")
            self._write(marked(r["text"], r["used"]) + "\n\n")


USED_OPEN, USED_CLOSE = "»", "«"
"""How plain text marks a sentence the answer used (the terminal highlights it instead)."""


def marked(text: str, used: list[tuple[int, int]]) -> str:
    """A passage's text with the sentences the answer used between » and «."""
    out, at = [], 0
    for start, end in used:
        out += [text[at:start], USED_OPEN, text[start:end], USED_CLOSE]
        at = end
    return "".join([*out, text[at:]])


def stdin_reader(stream: TextIO) -> Callable[[str], str]:
    """Read lines from a pipe: no prompt, end of input ends the chat."""

    def read(prompt: str) -> str:
        line = stream.readline()
        if not line:
            raise EOFError
        return line

    return read
