"""A line entered just as news comes is answered, whatever the order the two are seen in."""

import io
import threading

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from prompt_toolkit.output.vt100 import Vt100_Output

from archivist.terminal.screen import prompt_reader


class Burst:
    """News that comes `times` times, from another thread, at once each time it is watched."""

    def __init__(self, times: int) -> None:
        self.left = times
        self.shown = 0

    @property
    def settled(self) -> bool:
        return self.left == 0

    def show(self) -> None:
        self.shown += 1

    def subscribe(self, wake):
        if self.left:
            self.left -= 1
            threading.Thread(target=wake).start()
        return lambda: None


@pytest.mark.parametrize("times", [1, 2, 5])
def test_a_line_typed_ahead_of_news_is_answered(tmp_path, times):
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=DummyOutput()):
        pipe.send_text("How many days?\r")
        news = Burst(times)
        read = prompt_reader(tmp_path / "history", news)
        assert read("› ") == "How many days?"
        assert news.shown >= 1  # the news shown first; what is left comes after the answer


class _Terminal(io.StringIO):
    """Where a terminal's output goes: a tty, so the prompt asks it where the cursor is (and,
    like pexpect's pseudo-terminal, it never answers, so an ending prompt waits for it)."""

    def isatty(self) -> bool:
        return True


class Later(Burst):
    """News that comes once, a moment after it is first watched (a line is entered first)."""

    def subscribe(self, wake):
        if self.left:
            self.left -= 1
            threading.Timer(0.2, wake).start()
        return lambda: None


def test_a_line_entered_at_a_terminal_just_before_news_is_answered(tmp_path):
    # A prompt that has read its line still tidies up the terminal (waiting for the cursor
    # reports it asked for); news coming then must not drop the line as a prompt not started.
    terminal = Vt100_Output(_Terminal(), lambda: Size(rows=24, columns=80), term="xterm")
    with create_pipe_input() as pipe, create_app_session(input=pipe, output=terminal):
        pipe.send_text("/exit\rnext line\r")  # the next line shows a lost one at once
        news = Later(1)
        read = prompt_reader(tmp_path / "history", news)
        assert read("› ") == "/exit"
        assert news.shown == 1
        assert read("› ") == "next line"
