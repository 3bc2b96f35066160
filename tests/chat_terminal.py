"""Drive `archivist chat` in a real pseudo-terminal, as a person at a keyboard would."""

import os
import re
import sys
import termios
import time
from pathlib import Path

import pexpect
import pyte
from conftest import ROOT

from archivist.terminal.chat import PROMPT

TIMEOUT = 240  # generous: a loaded 2-core machine imports LangChain slowly; waits end on
# what the terminal shows, so a long one costs nothing when the machine is quick
# The prompt at the start of a line (after any terminal control codes), not a `›` in a passage;
# an xterm's prompt moves its cursor past the space instead of writing it.
PROMPT_LINE = re.compile(
    r"\r\n(?:\x1b\[[0-9;?]*[A-Za-z])*" + re.escape(PROMPT.rstrip()) + r"(?: |\x08\x1b\[2C)"
)
# The banner the chat prints once its agent is built (the prompt may come before it).
BANNER = re.compile(r"Archivist · [^\n]* · /help for commands")


def start_chat(
    *args: str,
    ollama_url: str,
    home: Path,
    backoff: float | None = None,
    term: str = "dumb",
    columns: int = 250,
) -> pexpect.spawn:
    """Start `archivist chat ARGS` in a pseudo-terminal.

    TERM=dumb keeps the output free of cursor movement and colour (what a dumb terminal
    gets), and a wide fixed size keeps lines from wrapping; another `term` (xterm) gets the
    live display a person sees, played from the start on the child's `screen` (a `Screen`).
    `backoff`: the seconds before the first retry of a refused chat request, in place of the
    second a user waits.
    """
    env = {
        **os.environ,
        "OLLAMA_HOST": ollama_url,
        "ARCHIVIST_HOME": str(home),
        "TERM": term,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
    }
    command = ["-m", "archivist"]
    if backoff is not None:  # the entry point `python -m archivist` runs, after the setting
        script = f"import archivist.ollama.transport as m; m.BACKOFF = {backoff}; "
        command = ["-c", script + "from archivist.cli import main; main()"]
    child = pexpect.spawn(
        sys.executable,
        [*command, "chat", *args],
        env=env,
        cwd=str(ROOT),
        encoding="utf-8",
        dimensions=(50, columns),
        timeout=TIMEOUT,
    )
    if term != "dumb":
        child.screen = Screen(child, columns)
    # pexpect sleeps 50 ms before every send, for programs that turn echo off late (a password
    # prompt); these tests send a key only once the chat reads key by key (`ready`).
    child.delaybeforesend = None
    return child


def spawn_chat(
    *args: str, ollama_url: str, home: Path, backoff: float | None = None, **terminal
) -> pexpect.spawn:
    """Start `archivist chat ARGS` in a pseudo-terminal and wait until its agent is built and
    the prompt under its banner takes keys: `before` then holds the notices after the banner.
    `terminal`: `term` and `columns`, as `start_chat` takes them."""
    child = start_chat(*args, ollama_url=ollama_url, home=home, backoff=backoff, **terminal)
    child.expect(BANNER)
    ready(child)
    return child


def ready(child: pexpect.spawn) -> None:
    """Wait for the prompt and for the input to be read key by key (raw mode).

    Keys sent earlier reach a terminal still in line mode, where Ctrl-D is no key but an
    end-of-file on the next read.
    """
    child.expect(PROMPT_LINE)
    assert key_by_key(child)


def key_by_key(child: pexpect.spawn, limit: float = TIMEOUT) -> bool:
    """Wait until the terminal is out of line mode (the chat reads key by key), looking every
    5 ms (a guard against hanging, not a timed assertion). Not its echo: the chat keeps that
    off all along, so that keys pressed during an answer do not land in it."""
    deadline = time.monotonic() + limit
    while termios.tcgetattr(child.child_fd)[3] & termios.ICANON:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


class Screen:
    """What a terminal of `columns` shows of a child's output: its bytes played through a
    terminal emulator (pyte), cursor movements, erasing and wrapping included."""

    def __init__(self, child: pexpect.spawn, columns: int, rows: int = 50) -> None:
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.Stream(self.screen)
        child.logfile_read = self

    def write(self, text: str) -> None:
        self.stream.feed(text)

    def flush(self) -> None:
        pass

    def lines(self) -> list[str]:
        """The screen's lines that hold something, trailing spaces cut."""
        return [line.rstrip() for line in self.screen.display if line.strip()]


def ask(child: pexpect.spawn, line: str) -> str:
    """Type a line, wait for the next prompt, and return what was printed in between."""
    child.sendline(line)
    ready(child)
    return child.before.replace("\r\n", "\n")


def leave(child: pexpect.spawn) -> int:
    """Press Ctrl-D at the prompt and return the exit status."""
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    return child.exitstatus


TOOL_LINE = re.compile(
    r'search_shop_docs\("How many days do I have to ask for a refund"\) · 5 results · \d+ ms'
)


def chat_requests(ollama) -> list:
    """The /api/chat bodies the fake Ollama received."""
    return ollama.requests_to("/api/chat")
