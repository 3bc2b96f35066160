"""Document loaders that misbehave as a hostile file can make a loader misbehave, named with
`--loader` in tests of the per-file time budget. Each is imported by the ingest's loading
process, so this folder must be on its PYTHONPATH."""

import os
import signal
import time
from dataclasses import dataclass, field

from archivist.ingest.loaders.base import report
from archivist.tools.progress import Recognised

SPIN_S = 60.0
"""How long the endless loaders hold the CPU at most: long past any budget a test sets, yet
finite, so an ingest without a budget ends (storing the file) rather than hanging its test."""


@dataclass
class Page:
    page_content: str
    metadata: dict = field(default_factory=dict)


def _spin() -> None:
    """Hold the CPU in Python code, as a backtracking pattern or a looping parser does."""
    deadline = time.monotonic() + SPIN_S
    while time.monotonic() < deadline:
        pass


class EndlessLoader:
    """A loader that never ends in any budget."""

    def __init__(self, path: str) -> None:
        self.path = path

    def load(self) -> list[Page]:
        _spin()
        return [Page("Read at last, long past any budget.")]


class EndlessOcrLoader(EndlessLoader):
    """A loader that reads a page by OCR, says so, then never ends."""

    def load(self) -> list[Page]:
        report(Recognised(os.path.basename(self.path), 1, 3))
        return super().load()


class CrashingLoader(EndlessLoader):
    """A loader whose process is killed while it reads (a parser's crash, the OOM killer)."""

    def load(self) -> list[Page]:
        os.kill(os.getpid(), signal.SIGKILL)
        return []
