"""Show an ingest's progress on stderr: a live bar on a terminal, plain lines elsewhere."""

import bisect
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from archivist.printable import printable, printable_name
from archivist.render import retry_notice
from archivist.tools.progress import (
    Discovered,
    Embedded,
    Event,
    Failed,
    Fetched,
    Loaded,
    Recognised,
    Retried,
    Stored,
)
from archivist.tools.words import count

if TYPE_CHECKING:
    from rich.progress import Progress


class Estimate:
    """How fast an ingest goes and how long it has left, from what this run measured so far,
    against `clock` (seconds).

    The work is the chunks to embed: each costs the embedding model its characters. How many
    the files not yet read will make is expected from those read so far: as many per byte
    (unchanged files, only hashed, make none, and count in that rate as they come). The rate
    is the chunks embedded per second over the later half of the time since the first were:
    the model's loading, the first request's wait and the burst of a new store's first
    vectors (embedded while the graph's imports loaded) are left out as the run goes on, and
    the window still grows with the run, so a rate that drifts is followed. Nothing is told
    before `SETTLE_SECONDS` of embedding and `SETTLE_SHARE` of the expected chunks: before
    that a rate is noise."""

    SETTLE_SECONDS = 3.0
    SETTLE_SHARE = 0.02
    SAMPLE_SECONDS = 0.1
    """How often the chunks embedded are noted, at most (a day's run notes under a million)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started: float | None = None
        """When the files were found."""
        self.files = self.bytes = 0
        """The files found, and their size in all (0: not known)."""
        self.passed_files = self.passed_bytes = 0
        """The files read or passed over (unchanged) so far, and their size."""
        self.loaded_chunks = 0
        """The chunks the files read so far made, to embed."""
        self.embedded = 0
        """The chunks embedded so far."""
        self.times: list[float] = []
        self.counts: list[int] = []
        """When chunks were embedded, and how many had been by then, from the first."""

    def add(self, event: Event) -> None:
        """Take one event of the run."""
        match event:
            case Discovered(files=files, bytes=size):
                self.started = self.clock() if self.started is None else self.started
                self.files += files
                self.bytes += size
            case Loaded(files=files, chunks=chunks, bytes=size):
                self.passed_files += files
                self.passed_bytes += size
                self.loaded_chunks += chunks
            case Embedded(chunks=chunks):
                self.embedded += chunks
                now = self.clock()
                if not self.times or now - self.times[-1] >= self.SAMPLE_SECONDS:
                    self.times.append(now)
                    self.counts.append(self.embedded)

    def expected_chunks(self) -> float | None:
        """The chunks the whole run will embed, as expected so far (None: nothing read yet)."""
        if self.bytes > 0 and self.passed_bytes > 0:
            share = self.passed_bytes / self.bytes
        elif self.files > 0 and self.passed_files > 0:
            share = self.passed_files / self.files  # sizes not known: by files
        else:
            return None
        return max(self.loaded_chunks / min(share, 1.0), self.embedded)

    def chunk_rate(self) -> float | None:
        """Chunks embedded per second, once that means something (else None)."""
        if not self.times:
            return None
        now = self.clock()
        seconds = now - self.times[0]
        expected = self.expected_chunks()
        if seconds < self.SETTLE_SECONDS or not expected:
            return None
        if self.embedded - self.counts[0] <= 0 or self.embedded < self.SETTLE_SHARE * expected:
            return None
        # From the last note at or before the middle of the time since the first.
        at = max(bisect.bisect_right(self.times, now - seconds / 2) - 1, 0)
        return (self.embedded - self.counts[at]) / (now - self.times[at])

    def file_rate(self) -> float | None:
        """Files read or passed over per second, once the chunk rate means something."""
        if self.started is None or self.chunk_rate() is None:
            return None
        return self.passed_files / max(self.clock() - self.started, 1e-9)

    def seconds_left(self) -> float | None:
        """The seconds the run has left, once that means something (else None)."""
        rate, expected = self.chunk_rate(), self.expected_chunks()
        if rate is None or expected is None:
            return None
        return max(expected - self.embedded, 0.0) / rate


class IngestProgress:
    """Receive the ingest graph's events and show them: files read, chunks embedded, rates,
    and the time left (`Estimate`: from the chunks embedded so far, and those the files left
    are expected to make).

    `enabled=False` (for `--json`) shows only retry notices; `live=False` (stderr is not a
    terminal) prints one line per stored or failed source instead of a bar.
    """

    def __init__(self, enabled: bool = True, live: bool = True) -> None:
        self.enabled = enabled
        self.estimate = Estimate()
        """The rates and the time left, shown by the bar."""
        self.stored_count = 0
        """Documents completely stored so far (what an interrupted run keeps)."""
        self.progress: Progress | None = None
        if enabled and live:
            from archivist.terminal.progress_bar import (
                ingest_bar,  # rich: ~0.15 s, for a terminal only
            )

            self.progress = ingest_bar()
            self.files = self.progress.add_task(
                "files", total=None, rate=self.estimate.file_rate, left=self.estimate.seconds_left
            )
            self.chunks = self.progress.add_task("chunks", total=0, rate=self.estimate.chunk_rate)
        self.pages: int | None = None
        """The bar of web pages fetched, shown from the first one."""
        self.ocr: int | None = None
        """The bar of the pages OCR reads in the file at hand, shown while it does."""

    def __enter__(self) -> "IngestProgress":
        if self.progress:
            self.progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.progress:
            self.progress.stop()

    def _line(self, message: str) -> None:
        message = printable(message)
        if self.progress:
            self.progress.console.print(message, markup=False, highlight=False)
        else:
            sys.stderr.write(message + "\n")

    def update(self, event: Event) -> None:
        """Take one event from the ingest graph."""
        if isinstance(event, Stored):
            self.stored_count += 1
        if isinstance(event, Retried):
            self._line(retry_notice(event))
        if not self.enabled:
            return
        self.estimate.add(event)
        if self.progress is None:
            if isinstance(event, Recognised) and event.pages >= 5:
                if event.page == 1 or event.page % 10 == 0 or event.page == event.pages:
                    self._line(
                        f"  OCR {printable_name(event.file)}: page {event.page} of {event.pages}"
                    )
            elif isinstance(event, Stored):
                source = printable_name(event.source)
                self._line(f"  stored {source} ({count(event.chunks, 'chunk')})")
            elif isinstance(event, Failed):
                self._line(f"  failed {printable_name(event.source)}: {event.reason}")
            return
        match event:
            case Discovered(files=files):
                self.progress.update(self.files, total=files)
            case Loaded(files=files, chunks=chunks):
                self.progress.advance(self.files, files)
                task = self.progress.tasks[self.chunks]
                self.progress.update(self.chunks, total=(task.total or 0) + chunks)
            case Embedded(chunks=chunks):
                self.progress.advance(self.chunks, chunks)
            case Failed(source=source, reason=reason):
                self._line(f"  failed {printable_name(source)}: {reason}")
            case Fetched():
                if self.pages is None:
                    self.pages = self.progress.add_task("pages", total=None)
                self.progress.advance(self.pages, 1)
            case Recognised(page=page, pages=pages):
                if self.ocr is None:
                    self.ocr = self.progress.add_task("OCR", total=pages)
                self.progress.update(self.ocr, completed=page, total=pages)
                if page == pages:
                    self.progress.remove_task(self.ocr)
                    self.ocr = None
