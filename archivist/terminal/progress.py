"""Show an ingest's progress on stderr: a live bar on a terminal, plain lines elsewhere."""

import sys
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


class IngestProgress:
    """Receive the ingest graph's events and show them: files read, chunks embedded, rates,
    and the time left (from the files' rate: chunk totals are only known batch by batch;
    reading runs only a few requests ahead of the embedder).

    `enabled=False` (for `--json`) shows only retry notices; `live=False` (stderr is not a
    terminal) prints one line per stored or failed source instead of a bar.
    """

    def __init__(self, enabled: bool = True, live: bool = True) -> None:
        self.enabled = enabled
        self.stored_count = 0
        """Documents completely stored so far (what an interrupted run keeps)."""
        self.progress: Progress | None = None
        if enabled and live:
            from archivist.terminal.progress_bar import (
                ingest_bar,  # rich: ~0.15 s, for a terminal only
            )

            self.progress = ingest_bar()
            self.files = self.progress.add_task("files", total=None, eta=True)
            self.chunks = self.progress.add_task("chunks", total=0)
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
