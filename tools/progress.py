"""Progress events: the typed records every long storage or ingest operation reports, and
the one callback type that hears them.

Renderers (the CLI's bar, a notebook, the server's stream) match on the record's type; the
server sends `as_dict(event)`, `{"event": <name>, **fields}`.
"""

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class Discovered:
    """The files of a run are found."""

    name: ClassVar[str] = "discovered"
    files: int


@dataclass(frozen=True)
class Loaded:
    """A batch of files is read: `files` passed over, `unchanged` of them, `chunks` to embed."""

    name: ClassVar[str] = "loaded"
    files: int
    unchanged: int
    chunks: int


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
    """An embedding request failed and is tried again, attempt `attempt`, in `wait` s."""

    name: ClassVar[str] = "retry"
    error: str
    attempt: int
    wait: float


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


Event = (
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

ProgressFn = Callable[[Event], None]
"""Called with each event as it happens."""


def ignore(event: Event) -> None:
    """Report nothing (the default when no callback is given)."""


def as_dict(event: Event) -> dict[str, Any]:
    """The event as plain data: `{"event": <name>, **its fields}`."""
    return {"event": event.name, **asdict(event)}
