"""The live bar of an ingest on a terminal (rich), imported only where one is shown."""

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second, e.g. `41.7/s`, from the task's `rate` (a callable: None until the
    rate means something)."""

    def render(self, task: Task) -> Text:
        rate = task.fields["rate"]()
        return Text(f"{rate:.1f}/s" if rate else "–/s", style="progress.data.speed")


class EtaColumn(ProgressColumn):
    """The time left, from the task's `left` (a callable: None until it means something)."""

    max_refresh = 0.5

    def render(self, task: Task) -> Text:
        left = task.fields.get("left")
        seconds = left() if left else None
        if seconds is None:
            return Text("")
        minutes, seconds = divmod(round(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        return Text(f"{hours}:{minutes:02d}:{seconds:02d} left", style="progress.remaining")


def ingest_bar() -> Progress:
    """Files read and chunks embedded, their rates, and the time left, on stderr."""
    return Progress(
        TextColumn("{task.description:<7}"),
        BarColumn(),
        MofNCompleteColumn(),
        RateColumn(),
        TimeElapsedColumn(),
        EtaColumn(),
        console=Console(stderr=True),
        transient=True,
    )
