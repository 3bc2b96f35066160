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
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per second, e.g. `41.7/s`."""

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed:.1f}/s" if task.speed else "–/s", style="progress.data.speed")


class EtaColumn(TimeRemainingColumn):
    """Time remaining, shown only on tasks whose total is known from the start."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("eta") else Text("")


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
