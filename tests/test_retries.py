"""The one retry loop (`archivist.tools.retries`), which the ingest's embedding requests and the
Ollama seam's requests share: how often, how long between, what is raised in the end."""

import pytest

from archivist.tools import retries


class Busy(Exception):
    pass


def failing(times: int, error: Exception):
    calls = []

    def send():
        calls.append(1)
        if len(calls) <= times:
            raise error
        return "answer"

    return send, calls


@pytest.fixture
def waits(monkeypatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(retries.time, "sleep", slept.append)
    return slept


def test_waits_double_up_to_the_cap_and_each_retry_is_heard(waits):
    send, calls = failing(3, Busy("busy"))
    heard = []
    answer = retries.with_retries(
        send,
        lambda exc: isinstance(exc, Busy),
        attempts=4,
        backoff=1.0,
        max_backoff=3.0,
        on_retry=lambda exc, attempt, wait, attempts: heard.append((str(exc), attempt, wait)),
    )
    assert answer == "answer" and len(calls) == 4
    assert waits == [1.0, 2.0, 3.0]
    assert heard == [("busy", 1, 1.0), ("busy", 2, 2.0), ("busy", 3, 3.0)]


def test_the_last_failure_is_raised_as_it_came_after_the_attempts(waits):
    error = Busy("still busy")
    send, calls = failing(10, error)
    with pytest.raises(Busy) as raised:
        retries.with_retries(send, lambda exc: True, attempts=3, backoff=0.5)
    assert raised.value is error and len(calls) == 3 and waits == [0.5, 1.0]


def test_a_failure_that_cannot_pass_is_not_sent_again(waits):
    send, calls = failing(1, ValueError("bad input"))
    with pytest.raises(ValueError, match="bad input"):
        retries.with_retries(send, lambda exc: isinstance(exc, Busy))
    assert len(calls) == 1 and waits == []
