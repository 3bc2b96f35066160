"""The chat model factory: the one module that imports `langchain_ollama`."""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pydantic
from langchain_ollama import ChatOllama

from archivist.ollama.clients import langchain_kwargs
from archivist.ollama.transport import Endpoint, UnreadableAnswer, transient, with_retries


@contextmanager
def _reading(path: str) -> Iterator[None]:
    """Turn the client's failures to read an answer into UnreadableAnswer: JSON it cannot
    decode, fields its models refuse."""
    try:
        yield
    except json.JSONDecodeError as exc:  # orjson's error is one too
        problem = "an empty answer" if not exc.doc.strip() else f"not JSON ({exc.msg})"
        raise UnreadableAnswer(path, problem) from None
    except pydantic.ValidationError:
        raise UnreadableAnswer(path, "not what Ollama answers") from None


class CompleteChatOllama(ChatOllama):
    """ChatOllama that retries a request a busy Ollama refused (or whose connection was cut),
    and refuses an answer whose stream ended before Ollama's closing line.

    A retry is announced (a `Retried` event, which the chat and `ask` show) and made only while no
    token has been shown: a half-streamed answer is never started again. When Ollama dies
    mid-answer the stream just stops; without the check the half-written answer would pass
    for a whole one.
    """

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        watched = _Streamed(run_manager)

        def send():
            watched.tokens = False
            try:
                with _reading("/api/chat"):
                    return ChatOllama._generate(self, messages, stop, watched, **kwargs)
            except ValueError as exc:
                if "No data received" not in str(exc):
                    raise
                raise UnreadableAnswer("/api/chat", "an empty answer") from None

        result = with_retries(send, may_retry=lambda exc: not watched.tokens and transient(exc))
        if not (result.generations[0].generation_info or {}).get("done"):
            raise httpx.RemoteProtocolError("Ollama stopped before the answer was complete.")
        return result


class _Streamed:
    """A model run's callback manager that notes whether a token was passed on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokens = False

    def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
        self.tokens = True
        if self.inner is not None:
            self.inner.on_llm_new_token(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def chat_model(endpoint: Endpoint, model: str, **options: Any) -> ChatOllama:
    """Build the chat model (no request is made until it is used)."""
    return CompleteChatOllama(model=model, **langchain_kwargs(endpoint), **options)
