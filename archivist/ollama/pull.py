"""Offer to pull the models Ollama lacks, with a progress bar over /api/pull's stream."""

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)

from archivist.failures import explained
from archivist.ollama import Ollama
from archivist.settings import Settings, mask_url


def offer_pull(settings: Settings, missing: list[str], console: Console | None = None) -> None:
    """Ask, for each missing model, whether to pull it now, and pull it with a progress bar.

    A declined offer changes nothing: the command goes on and names `ollama pull` itself.
    """
    console = console or Console(stderr=True, highlight=False)
    host = mask_url(settings.ollama_host)
    for name in missing:
        if not typer.confirm(
            f"The model '{name}' is not in Ollama at {host}. Pull it now?", default=True, err=True
        ):
            continue
        pull_with_progress(settings, name, console)


def pull_with_progress(settings: Settings, name: str, console: Console) -> None:
    """Pull a model, showing Ollama's status and the bytes of each layer as they arrive."""
    ollama = Ollama(settings)
    with explained(settings, f"Pulling '{name}' failed"):
        if console.is_dumb_terminal:
            ollama.pull(name, _status_lines(name, console))
        else:
            _pull_with_bar(ollama, name, console)
    console.print(f"Pulled {name}.")


def _pull_with_bar(ollama: Ollama, name: str, console: Console) -> None:
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    )
    with progress:
        task = progress.add_task(f"{name}: starting", total=None)

        def update(status: str, completed: int, total: int) -> None:
            # Only a layer's lines carry sizes; the others (manifest, digest) keep the bar.
            sizes = {"completed": completed, "total": total} if total else {}
            progress.update(task, description=f"{name}: {status}", **sizes)

        ollama.pull(name, update)


def _status_lines(name: str, console: Console):
    """A terminal that cannot move its cursor gets a line for each step instead of a bar."""
    shown = set()

    def update(status: str, completed: int, total: int) -> None:
        if status not in shown:
            shown.add(status)
            size = f" ({total / 1e9:.1f} GB)" if total else ""
            console.print(f"{name}: {status}{size}")

    return update
