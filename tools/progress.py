"""Progress reports: the one callback shape every long storage or ingest operation takes."""

from collections.abc import Callable
from typing import Any

ProgressFn = Callable[[str, dict[str, Any]], None]
"""Called with an event name ("stored", "copied", …) and that event's fields."""


def ignore(event: str, fields: dict[str, Any]) -> None:
    """Report nothing (the default when no callback is given)."""
