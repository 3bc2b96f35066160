"""The context guard: fit a conversation into the model's context window, saying what it left out.

Ollama silently drops the start of a prompt that does not fit `num_ctx`, and silently shifts
the window while generating past it. Archivist therefore asks for an explicit window, keeps an
answer's share of it free (`num_predict`), and fits every request into the rest itself:
oldest search results first, then whole earlier turns, then passages of the current turn's
results, each time with a note for the user.

Token counts are estimates, since the Ollama API has no tokenizer endpoint: a quarter of a
token per ASCII character (English runs about four characters a token) and one token for any
other character (CJK text runs about one a character), plus a few tokens per message for the
chat template. They err high for English and about right for Chinese.
"""

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    trim_messages,
)

from archivist.tools.errors import ArchivistError
from archivist.tools.words import count as count_words

MESSAGE_OVERHEAD = 4
"""Tokens the chat template adds around each message (role markers, separators)."""
_RESULT = re.compile(r'\n?<result n="\d+"[^>]*>.*?</result>', re.DOTALL)


def estimate_tokens(text: str) -> int:
    """Estimate a text's tokens: ASCII characters count a quarter, others one each."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    return math.ceil(ascii_chars / 4) + len(text) - ascii_chars


def message_tokens(message: BaseMessage) -> int:
    """Estimate the tokens one message takes in a prompt."""
    tokens = MESSAGE_OVERHEAD + estimate_tokens(_text(message))
    if isinstance(message, AIMessage) and message.tool_calls:
        calls = [{"name": c["name"], "arguments": c["args"]} for c in message.tool_calls]
        tokens += estimate_tokens(json.dumps(calls, ensure_ascii=False))
    return tokens


def tools_tokens(schemas: Sequence[dict[str, Any]]) -> int:
    """Estimate the tokens the tool definitions add to a prompt."""
    return estimate_tokens(json.dumps(list(schemas), ensure_ascii=False)) if schemas else 0


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return "".join(p if isinstance(p, str) else str(p.get("text", "")) for p in content)


@dataclass(frozen=True)
class Window:
    """The context window asked of Ollama and how it is shared."""

    num_ctx: int
    """Tokens of context Ollama is asked to allocate."""
    answer: int
    """Tokens kept free for the answer (and any reasoning): Ollama's `num_predict`."""

    @property
    def prompt(self) -> int:
        """Tokens the whole prompt may take."""
        return self.num_ctx - self.answer


def window_for(context_length: int | None, cap: int) -> Window:
    """Size the window: the model's context length, at most `cap`; a quarter for the answer."""
    num_ctx = min(context_length or cap, cap)
    return Window(num_ctx, max(256, num_ctx // 4))


@dataclass
class Fitted:
    """Messages that fit, and what was left out to make them fit."""

    messages: list[BaseMessage]
    notes: list[str] = field(default_factory=list)


def turn_start(messages: Sequence[BaseMessage]) -> int:
    """Return where the current turn starts: its human message (0 when there is none)."""
    return max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=0)


def question_of(messages: Sequence[BaseMessage]) -> str:
    """Return the question of the current turn ("" when there is none)."""
    first = messages[turn_start(messages)] if messages else None
    return str(first.content) if isinstance(first, HumanMessage) else ""


def complete_tool_calls(messages: Sequence[BaseMessage]) -> list[BaseMessage]:
    """Drop tool calls left without results (a turn stopped with Ctrl-C), and stray results."""
    answered = {m.tool_call_id for m in messages if isinstance(m, ToolMessage)}
    kept: list[BaseMessage] = []
    asked: set[str] = set()
    for message in messages:
        if isinstance(message, AIMessage) and message.tool_calls:
            ids = {c["id"] for c in message.tool_calls}
            if not ids <= answered:
                continue
            asked |= ids
        if isinstance(message, ToolMessage) and message.tool_call_id not in asked:
            continue
        kept.append(message)
    return kept


def shrink_results(text: str, limit: int) -> tuple[str, int]:
    """Remove the last `<result>` passages of a text until it fits `limit` tokens.

    Returns the text and how many passages were removed. Whole passages go, so each one left
    keeps its number and source, and the model can still cite it.
    """
    spans = [m.span() for m in _RESULT.finditer(text)]
    removed = 0
    while spans and estimate_tokens(text) > limit:
        start, end = spans.pop()
        text = text[:start] + text[end:]
        removed += 1
    return text, removed


def _stub(message: ToolMessage) -> ToolMessage:
    passages = len(_RESULT.findall(_text(message)))
    stubbed = count_words(passages, "passage")
    note = f"[{stubbed} from an earlier search, left out to fit the context window]"
    return message.model_copy(update={"content": note})


class _Sizes:
    """Token estimates of messages, each counted once however often it is weighed."""

    def __init__(self) -> None:
        # By id(), holding the message too, so no id is reused while this lives.
        self._known: dict[int, tuple[BaseMessage, int]] = {}

    def __call__(self, messages: Sequence[BaseMessage]) -> int:
        return sum(self.one(m) for m in messages)

    def one(self, message: BaseMessage) -> int:
        """Estimate one message's tokens."""
        if id(message) not in self._known:
            self._known[id(message)] = (message, message_tokens(message))
        return self._known[id(message)][1]


def _fit_history(
    history: list[BaseMessage], room: int, count: _Sizes
) -> tuple[list[BaseMessage], int, int]:
    """Fit earlier turns into `room`: stub their search results, oldest first, then leave out
    the oldest turns whole. Returns what is kept, the messages left out, the results stubbed."""
    stubbed: list[int] = []
    size = count(history)
    for i, message in enumerate(history):
        if size <= room:
            break
        if isinstance(message, ToolMessage) and not _text(message).startswith("["):
            history[i] = _stub(message)
            size += count.one(history[i]) - count.one(message)
            stubbed.append(i)
    kept = history
    if size > room:
        kept = trim_messages(
            history,
            max_tokens=max(room, 0),
            token_counter=count,
            strategy="last",
            start_on="human",
            allow_partial=False,
        )
    dropped = len(history) - len(kept)
    return kept, dropped, sum(1 for i in stubbed if i >= dropped)


def _fit_current(
    current: list[BaseMessage], room: int, count: _Sizes
) -> tuple[list[BaseMessage], int]:
    """Cut the last passages of the current turn's search results until it fits `room`;
    return the messages and the passages cut."""
    cut = 0
    for i, message in enumerate(current):
        over = count(current) - room
        if over <= 0:
            break
        if isinstance(message, ToolMessage | HumanMessage):
            own = estimate_tokens(_text(message))
            text, removed = shrink_results(_text(message), max(own - over, 0))
            if removed:
                current[i] = message.model_copy(update={"content": text})
                cut += removed
    return current, cut


class MessageTooLong(ArchivistError):
    """A question that cannot fit the model's context window, however the history is cut."""


def fit_messages(messages: Sequence[BaseMessage], limit: int | None, num_ctx: int) -> Fitted:
    """Fit a conversation (without its system prompt) into `limit` tokens.

    The current turn (from the last human message on) is kept; before it, search results of
    earlier turns are shortened first, then the oldest turns are left out whole, so a tool
    call is never separated from its result. If the current turn is still too long, its
    search results lose their last passages. What was left out is said in the notes.
    Raises ArchivistError when even that cannot make the question fit.
    """
    messages = complete_tool_calls(messages)
    count = _Sizes()
    if limit is None or count(messages) <= limit:
        return Fitted(messages)
    start = turn_start(messages)
    history, current = messages[:start], messages[start:]
    kept, dropped, shortened = _fit_history(history, limit - count(current), count)
    current, cut = _fit_current(current, limit - count(kept), count)
    total = count(kept) + count(current)
    if total > limit:
        raise MessageTooLong(
            f"This message does not fit the model's context window (about {total} tokens "
            f"where {limit} are left for it in a {num_ctx}-token window).",
            "Shorten it, or send a part at a time; --num-ctx raises the window if the model "
            "reads more.",
        )
    parts = []
    if dropped:
        parts.append(f"left out {count_words(dropped, 'earlier message')}")
    if shortened:
        parts.append(f"shortened {count_words(shortened, 'earlier search result')}")
    if cut:
        parts.append(f"cut {count_words(cut, 'passage')} from this turn's search results")
    notes = [f"To fit the {num_ctx}-token context window: {'; '.join(parts)}."] if parts else []
    return Fitted([*kept, *current], notes)
