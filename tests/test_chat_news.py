"""A line entered just as news comes is answered, whatever the order the two are seen in."""

import threading

import pytest
from prompt_toolkit.application import create_app_session
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from archivist.terminal import prompt_reader


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
