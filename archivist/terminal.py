"""The chat on a terminal: prompt_toolkit for input, rich for streamed Markdown answers."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.rule import Rule
from rich.segment import Segment
from rich.spinner import Spinner
from rich.text import Text

from archivist.agent.records import Passage, Turn
from archivist.chat import invalid_line, sources_line, unsearched_line
from archivist.printable import printable, printable_name
from archivist.render import tool_line


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

    def event(self, kind: str, data: Any) -> None:
        if kind == "token":
            if self._thinking:
                self._settle()
            data = printable(data)
            self._text += data
            if self.live:
                self._show(_Tail(self._text))
            else:
                self.console.file.write(data)
                self.console.file.flush()
        elif kind == "thinking":
            self._think(data)
        elif kind == "tool":
            self._settle()
            self._print(tool_line(data), "dim")
            if self.live:
                self._show(Spinner("dots", Text(" working…", style="dim")))
        elif kind in ("note", "retry"):
            self._settle()
            self._print(f"Note: {data}", "yellow")

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

    def sources(self, results: list[Passage]) -> None:
        self._settle()
        if not results:
            self._print("No search results yet in this conversation.")
        for r in results:
            title = Text(f"[{r['n']}] {printable_name(r['source'])} · score {r['score']:.3f}")
            self.console.print(Rule(title, align="left"))
            self.console.print(printable(r["text"]), markup=False, highlight=False)


def prompt_reader(history: Path) -> Callable[[str], str]:
    """Read input with prompt_toolkit: history kept in `history`, pastes keep their lines."""
    from prompt_toolkit import PromptSession
    from prompt_toolkit.history import FileHistory
    from prompt_toolkit.key_binding import KeyBindings

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
    return lambda prompt: session.prompt(prompt)
