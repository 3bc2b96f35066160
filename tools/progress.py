"""Events: the typed records every long operation reports as it runs — an ingest, a store's
copy, an agent's turn, an evaluation — and the one callback type that hears them.

Renderers (the CLI's bar and chat view, a notebook, the server's stream) match on the
record's type; the server sends `as_dict(event)`, `{"event": <name>, **fields}`. Inside a
LangGraph run, steps send them as the custom callback event named `CHANNEL`.
"""

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

CHANNEL = "archivist"
"""The custom callback event's name that carries an event out of a graph run."""


@dataclass(frozen=True)
class Discovered:
    """The files of a run are found."""

    name: ClassVar[str] = "discovered"
    files: int
    bytes: int = 0
    """Their size in all (0: not known, as for the pages of a site)."""


@dataclass(frozen=True)
class Loaded:
    """A batch of files is read: `files` passed over, `unchanged` of them, `chunks` to embed."""

    name: ClassVar[str] = "loaded"
    files: int
    unchanged: int
    chunks: int
    bytes: int = 0
    """The size of the files passed over."""


@dataclass(frozen=True)
class Embedded:
    """Some of a source's chunks are embedded and stored."""

    name: ClassVar[str] = "embedded"
    source: str
    chunks: int


@dataclass(frozen=True)
class Stored:
    """A source is completely stored, `chunks` in all."""

    name: ClassVar[str] = "stored"
    source: str
    chunks: int


@dataclass(frozen=True)
class BatchStored:
    """A storing step is done: `documents` completed in it."""

    name: ClassVar[str] = "batch_stored"
    documents: int


@dataclass(frozen=True)
class Failed:
    """A file or document could not be read or embedded."""

    name: ClassVar[str] = "failed"
    source: str
    reason: str


@dataclass(frozen=True)
class Retried:
    """A request Ollama refused is tried again: retry `attempt` (of `limit`, when known) in
    `wait` s. `request` says which: "embedding" (`error`: the failure) or "chat" (`error`:
    why, in words, e.g. "Ollama answered with an error (…)")."""

    name: ClassVar[str] = "retry"
    error: str
    attempt: int
    wait: float
    request: str = "embedding"
    limit: int | None = None


@dataclass(frozen=True)
class Copied:
    """A store's copy has `chunks` of its `total` so far (`store`: the one copied)."""

    name: ClassVar[str] = "copied"
    chunks: int
    store: str = ""
    total: int | None = None


@dataclass(frozen=True)
class Fetched:
    """A web page was asked for: its URL (after redirects) and the HTTP status it got."""

    name: ClassVar[str] = "fetched"
    url: str
    status: int


@dataclass(frozen=True)
class Recognised:
    """OCR read page `page` of the `pages` of a file's that it reads (`file`: its path)."""

    name: ClassVar[str] = "recognised"
    file: str
    page: int
    pages: int


@dataclass(frozen=True)
class Token:
    """Answer text as the chat model streams it."""

    name: ClassVar[str] = "token"
    text: str


@dataclass(frozen=True)
class Thinking:
    """Reasoning text as a thinking model streams it."""

    name: ClassVar[str] = "thinking"
    text: str


@dataclass(frozen=True)
class Searched:
    """A tool call of a turn is done; `call` is its record (name, args, results)."""

    name: ClassVar[str] = "tool"
    call: Mapping[str, Any]


@dataclass(frozen=True)
class Note:
    """Something a turn's reader should know: what was left out to fit the context, a call
    written as text that could not be run."""

    name: ClassVar[str] = "note"
    text: str


@dataclass(frozen=True)
class CaseRan:
    """An evaluation ran one case once: the model's column `label`, the case's id, the
    attempt (from 0)."""

    name: ClassVar[str] = "case_ran"
    label: str
    case: str
    attempt: int


@dataclass(frozen=True)
class StoreReady:
    """An embedder comparison has `model`'s store ready to search."""

    name: ClassVar[str] = "store_ready"
    model: str


@dataclass(frozen=True)
class Generated:
    """Writing a test set: `kept` cases kept from `tried` passages so far."""

    name: ClassVar[str] = "generated"
    kept: int
    tried: int


WriteEvent = (
    Discovered
    | Loaded
    | Embedded
    | Stored
    | BatchStored
    | Failed
    | Retried
    | Copied
    | Fetched
    | Recognised
)
TurnEvent = Token | Thinking | Searched | Note | Retried
EvalEvent = CaseRan | StoreReady | Generated
Event = WriteEvent | TurnEvent | EvalEvent

ProgressFn = Callable[[Event], None]
"""Called with each event as it happens."""


def ignore(event: Event) -> None:
    """Report nothing (the default when no callback is given)."""


def as_dict(event: Event) -> dict[str, Any]:
    """The event as plain data: `{"event": <name>, **its fields}`."""
    return {"event": event.name, **asdict(event)}
