"""The chat-completions API in Archivist's terms: the models served, a request read into a
question and the conversation before it, and a turn written back as OpenAI clients read it.

Every answer is a turn of the agent `archivist ask` and `archivist chat` run
(`Archivist.agent`, `archivist.turnlog.logged_turn`): the same graph, tools, citations and
turn log. The API is stateless: the conversation is the messages the client sends, given to
the turn as its history, so a follow-up is understood as in the chat.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from archivist import failures
from archivist.agent.records import Turn
from archivist.app import Archivist
from archivist.render import notice_text, place_text, tool_line
from archivist.tools.errors import ArchivistError, ModelMissing, StoreLocked, StoreNotFound
from archivist.tools.progress import Event, Note, ProgressFn, Retried, Searched, Thinking, Token

if TYPE_CHECKING:
    from langchain_core.messages import BaseMessage

    from archivist.agent.setup import AgentSetup

MODEL = "archivist"
"""The model that searches every served store; `archivist/<store>` searches one."""
CHAT_MODEL_SEPARATOR = "@"
"""`archivist/shop_docs@qwen2.5:7b`: the chat model behind a served model, for this request."""
CHAT_MODEL_HEADER = "x-archivist-chat-model"
"""The header that names the chat model for a request (the suffix wins over it)."""
MAX_MESSAGES = 1000
MAX_MESSAGE_CHARS = 400_000
"""A message's text, at most (a question longer than the model's context is refused anyway)."""
MAX_SETUPS = 16
"""Agents kept built at once (per stores and chat model); the least recently used goes."""
SOURCES_HEADING = "Sources:"
_SOURCE_LINE = re.compile(r"- \[\d+\] .*")


class APIError(Exception):
    """A request the API refuses or could not answer, in OpenAI's error shape."""

    def __init__(
        self,
        status: int,
        message: str,
        kind: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = (
            status,
            message,
            kind,
            param,
            code,
        )

    def body(self) -> dict[str, Any]:
        """The JSON a client gets: `{"error": {"message", "type", "param", "code"}}`."""
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


def api_error(exc: BaseException, settings: Any = None) -> APIError:
    """Word a failure of a request as the API answers it, the fix in the message."""
    from archivist.agent.context import MessageTooLong

    if isinstance(exc, APIError):
        return exc
    if settings is not None and not isinstance(exc, ArchivistError):
        explained = failures.explain(exc, settings)
        exc = explained if explained is not None else exc
    if isinstance(exc, MessageTooLong):
        return APIError(400, str(exc), param="messages", code="context_length_exceeded")
    if isinstance(exc, ModelMissing):
        return APIError(404, str(exc), "not_found_error", "model", "model_not_found")
    if isinstance(exc, StoreNotFound):
        return APIError(404, str(exc), "not_found_error", "model", "store_not_found")
    if isinstance(exc, StoreLocked):
        return APIError(503, str(exc), "server_error", code="store_locked")
    if isinstance(exc, ArchivistError):
        return APIError(503, str(exc), "server_error", code="unavailable")
    return APIError(
        500,
        f"Archivist failed: {type(exc).__name__}: {exc}. The server's log has the details; "
        "`archivist doctor` checks the setup.",
        "server_error",
    )


@dataclass(frozen=True)
class Target:
    """What a request's model names: the stores to search and the chat model behind them."""

    stores: tuple[str, ...]
    chat_model: str | None
    """None: the configured one."""


@dataclass
class ChatRequest:
    """A chat-completions request, read: the question, the conversation before it, the model."""

    model: str
    question: str
    history: list[BaseMessage] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False

    @classmethod
    def read(cls, body: Any) -> ChatRequest:
        """Read a request's JSON body; refuse what cannot be answered, saying why.

        System (and developer) messages are left out: the agent has its own instructions,
        which name the stores and how to cite. Tool messages are left out too: the agent runs
        its own tools. Options Archivist does not use (temperature, max_tokens, tools …) are
        accepted and ignored, as clients send them unasked."""
        from langchain_core.messages import AIMessage, HumanMessage

        if not isinstance(body, dict):
            raise APIError(400, "The request body must be a JSON object.")
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise APIError(400, f"Name a model: {MODEL} or {MODEL}/<store>.", param="model")
        if body.get("n", 1) != 1:
            raise APIError(400, "Archivist gives one answer per request: leave n at 1.", param="n")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError(
                400, "Send the conversation as `messages`, the question last.", param="messages"
            )
        if len(messages) > MAX_MESSAGES:
            raise APIError(
                400,
                f"The conversation has {len(messages)} messages; at most {MAX_MESSAGES} are "
                "taken. Start a new conversation.",
                param="messages",
                code="array_above_max_length",
            )
        said = [(message["role"], text) for message, text in _texts(messages)]
        if not said or said[-1][0] != "user" or not said[-1][1].strip():
            raise APIError(400, "The last message must be the user's question.", param="messages")
        history: list[BaseMessage] = [
            HumanMessage(text) if role == "user" else AIMessage(without_sources(text))
            for role, text in said[:-1]
            if text.strip()
        ]
        stream = body.get("stream") is True
        options = body.get("stream_options")
        include_usage = stream and isinstance(options, dict) and options.get("include_usage")
        return cls(model, said[-1][1], history, stream, include_usage is True)


def _texts(messages: list[Any]) -> list[tuple[dict[str, Any], str]]:
    """The user's and assistant's messages with their text, checked."""
    said = []
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise APIError(400, f"{where} must be an object with a role.", param=where)
        role = message["role"]
        if role not in ("system", "developer", "user", "assistant", "tool", "function"):
            raise APIError(400, f"{where} has an unknown role '{role}'.", param=f"{where}.role")
        if role not in ("user", "assistant"):
            continue
        text = _text(message.get("content"), f"{where}.content")
        if len(text) > MAX_MESSAGE_CHARS:
            raise APIError(
                400,
                f"{where} has {len(text):,} characters; at most {MAX_MESSAGE_CHARS:,} are taken. "
                "Shorten it, or ingest the text into a store and ask about it.",
                param=f"{where}.content",
                code="string_above_max_length",
            )
        said.append((message, text))
    return said


def _text(content: Any, where: str) -> str:
    """A message's text: a string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind != "text" or not isinstance(part.get("text"), str):
                raise APIError(
                    400,
                    f"{where} holds a {kind or 'malformed'} part: Archivist answers from text "
                    "only. Send the question as text.",
                    param=where,
                )
            texts.append(part["text"])
        return "\n".join(texts)
    raise APIError(400, f"{where} must be a string or a list of text parts.", param=where)


def sources_text(turn: Turn) -> str:
    """The list of cited sources added under an answer (empty when nothing is cited)."""
    if not turn["citations"]:
        return ""
    lines = [f"- [{c['n']}] {place_text(c)}" for c in turn["citations"]]
    return "\n\n" + "\n".join([SOURCES_HEADING, *lines])


def without_sources(text: str) -> str:
    """An earlier answer as the model gave it: without the sources list added under it."""
    head, found, tail = text.rpartition("\n\n" + SOURCES_HEADING + "\n")
    if found and all(_SOURCE_LINE.fullmatch(line) for line in tail.strip().splitlines()):
        return head
    return text


def reasoning_text(event: Event) -> str | None:
    """What a turn's step shows as reasoning: thinking, a search done, a note; else None."""
    match event:
        case Thinking(text=text):
            return text
        case Searched(call=call):
            return tool_line(call) + "\n"  # type: ignore[arg-type]
        case Note() | Retried():
            return f"Note: {notice_text(event)}\n"
    return None


def extra(turn: Turn) -> dict[str, Any]:
    """The `archivist` field of a completion: the turn as `ask --json` prints it, without
    the question and the answer (the citations, every search with its passages, notes)."""
    return {key: value for key, value in turn.items() if key not in ("question", "answer")}


def usage(turn: Turn) -> dict[str, int]:
    """The tokens Ollama counted for the turn, as OpenAI clients read them."""
    used = turn["usage"]
    prompt, completion = used["input_tokens"], used["output_tokens"]
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class Completion:
    """One answer being written: the ids and the model name every chunk of it carries."""

    def __init__(self, model: str) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = model

    def whole(self, turn: Turn, reasoning: str) -> dict[str, Any]:
        """The completion of a request that did not ask for a stream."""
        message: dict[str, Any] = {
            "role": "assistant",
            "content": turn["answer"] + sources_text(turn),
        }
        if reasoning:
            message["reasoning_content"] = reasoning
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage(turn),
            MODEL: extra(turn),
        }

    def chunk(self, delta: dict[str, Any], finish: str | None = None, **more: Any) -> dict:
        """One streamed chunk carrying `delta`."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **more,
        }

    def usage_chunk(self, turn: Turn) -> dict[str, Any]:
        """The last chunk of a stream that asked for usage (`stream_options.include_usage`)."""
        return {**self.chunk({}), "choices": [], "usage": usage(turn)}


class StreamedAnswer:
    """Turn a turn's events into the deltas of a stream, as the chat's plain view shows them:
    answer tokens as content, thinking, searches and notes as reasoning; the whole answer at
    the end when none of it was streamed, then the sources."""

    def __init__(self) -> None:
        self.streamed = False

    def delta(self, event: Event) -> dict[str, str] | None:
        """The delta for one event (None: nothing to show)."""
        if isinstance(event, Token):
            if not event.text:
                return None
            self.streamed = True
            return {"content": event.text}
        reasoning = reasoning_text(event)
        return {"reasoning_content": reasoning} if reasoning else None

    def ending(self, turn: Turn) -> str:
        """The content still to send once the turn is done."""
        return ("" if self.streamed else turn["answer"]) + sources_text(turn)


@dataclass
class _Built:
    lock: threading.Lock = field(default_factory=threading.Lock)
    setup: AgentSetup | None = None


class ChatService:
    """The served models over one Archivist: which exist, and each request's turn."""

    def __init__(self, archivist: Archivist, stores: Sequence[str] = ()) -> None:
        self.archivist = archivist
        self.only = list(dict.fromkeys(stores))
        self._built: OrderedDict[Target, _Built] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def settings(self):
        return self.archivist.settings

    def check(self) -> None:
        """Open the stores before serving: a store named that does not exist is refused, and
        the store's client is opened once, before requests share it."""
        with failures.explained(self.settings):
            for name in self.only:
                self.archivist.store(name)
            self.archivist.store_names()
            self.archivist.turn_log  # noqa: B018 - built once, before threads share it

    def stores(self) -> list[str]:
        """The stores served: those named, else every store there is now."""
        if self.only:
            return list(self.only)
        with failures.explained(self.settings):
            return self.archivist.store_names()

    def model_ids(self) -> list[str]:
        """The models a client can name: `archivist`, and `archivist/<store>` for each store."""
        return [MODEL, *(f"{MODEL}/{name}" for name in self.stores())]

    def resolve(self, model: str, chat_model: str | None = None) -> Target:
        """The stores and chat model a request's model names; 404 with the list if none."""
        name, _, suffix = model.partition(CHAT_MODEL_SEPARATOR)
        chat_model = suffix.strip() or (chat_model or "").strip() or None
        stores = self.stores()
        if name == MODEL and stores:
            return Target(tuple(stores), chat_model)
        store = name.removeprefix(f"{MODEL}/")
        if name.startswith(f"{MODEL}/") and store in stores:
            return Target((store,), chat_model)
        listed = ", ".join(self.model_ids()) if stores else "none yet"
        fix = (
            f" Models: {listed}."
            if stores
            else " No store is served yet: archivist ingest PATH --store NAME makes one."
        )
        raise APIError(
            404,
            f"The model '{model}' does not exist.{fix} A chat model other than "
            f"{self.settings.chat_model} is named after '{CHAT_MODEL_SEPARATOR}': "
            f"{MODEL}{CHAT_MODEL_SEPARATOR}qwen2.5:7b.",
            "not_found_error",
            "model",
            "model_not_found",
        )

    def setup(self, target: Target) -> AgentSetup:
        """The agent for a target, built on its first request (asking Ollama what the chat
        model can do) and kept for the next ones."""
        with self._lock:
            built = self._built.get(target)
            if built is None:
                built = self._built[target] = _Built()
                while len(self._built) > MAX_SETUPS:
                    self._built.popitem(last=False)
            self._built.move_to_end(target)
        with built.lock:
            if built.setup is None:
                with failures.explained(self.settings):
                    built.setup = self.archivist.agent(target.stores, target.chat_model)
            return built.setup

    def answer(
        self, setup: AgentSetup, request: ChatRequest, on_event: ProgressFn | None = None
    ) -> Turn:
        """Answer a request's question after its history; the turn is logged as `serve`."""
        from archivist.turnlog import logged_turn

        log = self.archivist.turn_log
        with failures.explained(self.settings):
            return logged_turn(
                log, "serve", setup, request.question, on_event=on_event, history=request.history
            )
