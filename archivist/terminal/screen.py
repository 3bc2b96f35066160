"""The chat on a terminal: prompt_toolkit for input, rich for streamed Markdown answers."""

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Protocol, TextIO

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.rule import Rule
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from archivist.agent.records import ShownPassage, Turn
from archivist.printable import printable
from archivist.render import notice_text, place_text, relevance_text, tool_line
from archivist.terminal.chat import invalid_line, sources_line, unsearched_line
from archivist.tools.progress import Event, Note, Retried, Searched, Thinking, Token


class _Tail:
    """The last screenful of a Markdown text, so a long answer streams without scrolling junk."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(Markdown(self.text), options, pad=False)
        for line in lines[-max(console.size.height - 2, 1) :]:
            yield from line
            yield Segment.line()


class RichView:
    """Answers streamed as live Markdown, tool calls and sources as dim lines.

    On a terminal that cannot move its cursor (TERM=dumb) the tokens are written as they come,
    without a live display or spinner.
    """

    def __init__(self, console: Console, show_thinking: bool = False) -> None:
        self.console = console
        self.show_thinking = show_thinking
        self.live = console.is_interactive
        self._display: Live | None = None
        self._text = ""
        self._thinking = False
        self._open = False

    def _print(self, text: str, style: str = "") -> None:
        self.console.print(Text(printable(text), style=style), soft_wrap=True, highlight=False)

    def _show(self, renderable: Any) -> None:
        if self._display is None:
            self._display = Live(
                renderable,
                console=self.console,
                transient=True,
                refresh_per_second=12,
                vertical_overflow="visible",
            )
            self._display.start()
        else:
            self._display.update(renderable)

    def _settle(self) -> None:
        """End the live display and print the streamed text for good."""
        if self._display is not None:
            self._display.stop()
            self._display = None
        if self._thinking:
            self._thinking = False
            if not self.live:
                self.console.file.write("\n")
        if self._text:
            if self.live:
                self.console.print(Markdown(self._text))
            else:
                self.console.file.write("\n")
                self.console.file.flush()
        self._text = ""
        self._open = False

    def begin(self) -> None:
        self._text = ""
        self._thinking = False
        if self.live:
            self._show(Spinner("dots", Text(" working…", style="dim")))

    def event(self, event: Event) -> None:
        match event:
            case Token(text=text):
                if self._thinking:
                    self._settle()
                text = printable(text)
                self._text += text
                if self.live:
                    self._show(_Tail(self._text))
                else:
                    self.console.file.write(text)
                    self.console.file.flush()
            case Thinking(text=text):
                self._think(text)
            case Searched(call=call):
                self._settle()
                self._print(tool_line(call), "dim")
                if self.live:
                    self._show(Spinner("dots", Text(" working…", style="dim")))
            case Note() | Retried():
                self._settle()
                self._print(f"Note: {notice_text(event)}", "yellow")

    def _think(self, text: str) -> None:
        if not self.show_thinking:
            if self.live and not self._thinking:
                self._show(Spinner("dots", Text(" thinking…", style="dim")))
            self._thinking = True
            return
        if not self._thinking:
            if self._display is not None:
                self._display.stop()
                self._display = None
            self._thinking = True
        self.console.print(
            printable(text), end="", style="dim italic", markup=False, highlight=False
        )

    def finish(self, result: Turn) -> None:
        if not self._text:
            self._text = printable(result["answer"])
        self._settle()
        if line := sources_line(result):
            self._print(line, "dim")
        if line := invalid_line(result):
            self._print(line, "yellow")
        if line := unsearched_line(result):
            self._print(line, "dim")

    def stopped(self) -> None:
        self._settle()
        self._print("(stopped)", "dim")

    def error(self, message: str) -> None:
        self._settle()
        self._print(message, "red")

    def info(self, text: str) -> None:
        self._settle()
        self._print(text)

    def notice(self, text: str) -> None:
        self.info(text)

    def sources(self, results: list[ShownPassage]) -> None:
        self._settle()
        if not results:
            self._print("No search results yet in this conversation.")
        for r in results:
            cited = " · cited" if r["cited"] else ""
            # Above the rule rather than in it: a rule cuts a long place short.
            title = f"[{r['n']}] {place_text(r)}{relevance_text(r)}{cited}"
            self.console.print(Rule(style="dim"))
            self.console.print(Text(title, style="bold"), soft_wrap=True, highlight=False)
            text, at = Text(), 0
            for start, end in r["used"]:
                text.append(printable(r["text"][at:start]))
                text.append(printable(r["text"][start:end]), style="bold yellow")
                at = end
            text.append(printable(r["text"][at:]))
            self.console.print(text, highlight=False)


@contextmanager
def keys_unechoed(stream: TextIO) -> Iterator[None]:
    """Keep the terminal from echoing keys pressed while an answer streams.

    Its echo of Ctrl-C (`^C`), or of text typed ahead, lands after the live answer's last
    line, which rich pads to the terminal's width: the line wraps, the display's bottom moves
    down one line, and when the answer is printed for good its top line is left standing
    above it, shown twice. The prompt echoes what it reads itself (it reads key by key), and
    keys typed ahead are still read there. The terminal's settings are restored on the way
    out, however the chat ends.
    """
    try:
        import termios

        fd = stream.fileno()
        saved = termios.tcgetattr(fd)
    except (ImportError, OSError, ValueError):  # not a terminal, or no termios (Windows)
        yield
        return
    quiet = list(saved)
    quiet[3] &= ~termios.ECHO
    termios.tcsetattr(fd, termios.TCSANOW, quiet)
    try:
        yield
    finally:
        with suppress(OSError):
            termios.tcsetattr(fd, termios.TCSANOW, saved)


class News(Protocol):
    """What another thread has to say while the prompt waits for input
    (archivist.terminal.starting)."""

    @property
    def settled(self) -> bool:
        """Whether nothing more will come."""
        ...

    def show(self) -> None:
        """Show what has come so far (raises if it says the chat cannot go on)."""
        ...

    def subscribe(self, wake: Callable[[], None]) -> Callable[[], None]:
        """Have `wake` called, from any thread, when something comes; return the unsubscribe."""
        ...


def prompt_reader(history: Path, news: News | None = None) -> Callable[[str], str]:
    """Read input with prompt_toolkit: history kept in `history`, pastes keep their lines.

    Until `news` is settled, what it brings is shown as it comes: the prompt gives way (the
    text typed so far is kept), the news is printed, and the prompt comes back.
    """
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings
    from prompt_toolkit.utils import is_dumb_terminal

    bindings = KeyBindings()

    @bindings.add("escape", "enter")
    def _line_break(event) -> None:
        event.current_buffer.insert_text("\n")

    history.parent.mkdir(parents=True, exist_ok=True)
    session: PromptSession[str] = PromptSession(
        history=FileHistory(str(history)),
        key_bindings=bindings,
        prompt_continuation="  ",
    )

    def shown(prompt: str, typed: str) -> str:
        # A dumb terminal's prompt does not echo the text it starts with: it is shown as prompt.
        return prompt + typed if typed and is_dumb_terminal() else prompt

    def read(prompt: str) -> str:
        typed = ""
        while news is not None and not news.settled:
            news.show()
            if news.settled:
                break
            answered, typed = asyncio.run(
                _prompt_until_news(session, shown(prompt, typed), typed, news)
            )
            if answered:
                return typed
        return session.prompt(shown(prompt, typed), default=typed)

    return read


async def _prompt_until_news(session, prompt: str, typed: str, news: News) -> tuple[bool, str]:
    """Prompt until a line is entered (True, the line) or news comes (False, the text so far).

    The prompt gives way without a trace (a dumb terminal's, which cannot be erased, ends its
    line), and what was typed and not yet read stays for the next prompt.
    """
    from prompt_toolkit.application import get_app_or_none

    loop = asyncio.get_running_loop()
    came = asyncio.Event()

    def wake() -> None:
        # Called from the news' thread, maybe just after this prompt ended and closed its loop.
        with suppress(RuntimeError):
            loop.call_soon_threadsafe(came.set)

    unsubscribe = news.subscribe(wake)
    prompting = asyncio.ensure_future(session.prompt_async(prompt, default=typed))
    waiting = asyncio.ensure_future(came.wait())
    try:
        await asyncio.wait({prompting, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        unsubscribe()
        waiting.cancel()
    if prompting.done():
        return True, prompting.result()  # Ctrl-C and Ctrl-D raise as they do at any prompt
    # The application reading the keys: the session's, or the one a dumb terminal gets. It is
    # the current one from its start until it has finished, tidying up included (a prompt that
    # has read its line still waits for the terminal's cursor reports then): None means not
    # started, never "already ended with a line".
    running = get_app_or_none()
    if running is None:
        prompting.cancel()  # not started: it has read no key yet
        with suppress(asyncio.CancelledError):
            await prompting
        return False, typed
    # The prompt leaves no trace: it comes back under the news with the same text.
    running.erase_when_done = True
    try:
        # Asked to end, not cancelled: a line whose Enter it has already read is answered
        # (exit then refuses, the result being set), never dropped half-way.
        with suppress(Exception):
            running.exit(result=_GAVE_WAY)
        line = await prompting
    finally:
        running.erase_when_done = False
    if line is not _GAVE_WAY:
        return True, line  # entered just as the news came: the line is the user's, not lost
    # Read once the prompt has ended: keys it took in while it was being stopped count too.
    return False, session.default_buffer.text


_GAVE_WAY: Any = object()
"""The result a prompt that gave way to news ends with (never a line someone typed)."""
