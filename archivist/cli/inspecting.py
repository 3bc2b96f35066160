"""`doctor` and `logs`: the setup checked, and the turns answered."""

from typing import TYPE_CHECKING, Annotated

import typer
import typer.main

from archivist.cli.common import EmbedOpt, JsonOpt, ModelOpt, _print_json, _settings, app
from archivist.printable import printable
from archivist.tools.errors import (
    ArchivistError,
)

if TYPE_CHECKING:
    pass


@app.command()
def doctor(
    model: ModelOpt = None,
    embed_model: EmbedOpt = None,
    as_json: JsonOpt = False,
    repair: Annotated[
        bool,
        typer.Option(
            "--repair",
            help="Move damaged stores aside (into HOME/damaged), so that ingesting their "
            "sources builds them anew.",
        ),
    ] = False,
) -> None:
    """Check Ollama, the two models and the stores, and say how to fix each problem."""
    from dataclasses import asdict

    from archivist.doctor import run_checks

    checks = run_checks(_settings(chat_model=model, embed_model=embed_model), repair=repair)
    failed = any(not c.ok and not c.warning for c in checks)
    if as_json:
        _print_json({"ok": not failed, "checks": [asdict(check) for check in checks]})
    else:
        for check in checks:
            mark = "✓" if check.ok else ("!" if check.warning else "✗")
            print(f"{mark} {check.message}")
            if check.fix:
                print(f"  → {check.fix}")
    if failed:
        raise typer.Exit(1)


logs_app = typer.Typer(help="List the logged turns of ask and chat, or show one.")
app.add_typer(logs_app, name="logs")


@logs_app.callback(invoke_without_command=True)
def logs(
    ctx: typer.Context,
    limit: Annotated[
        int, typer.Option("-n", "--limit", min=1, help="How many of the latest turns.")
    ] = 20,
    turn_id: Annotated[int | None, typer.Option("--id", help="Show this turn in full.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """List the latest logged turns (question, model, searches, latency), oldest first."""
    if ctx.invoked_subcommand:
        return
    if turn_id is not None:
        _show_turn(turn_id, as_json)
        return
    from archivist.turnlog import TurnLog, summary

    turns = TurnLog(_settings().log_path).recent(limit)
    if as_json:
        _print_json(turns)
        return
    for turn in turns:
        print(printable(summary(turn)))
    if not turns:
        print("No turns logged yet. They are logged by `archivist ask`, `chat` and `serve`.")


@logs_app.command("show")
def logs_show(
    turn_id: Annotated[int, typer.Argument(help="The turn's id, as `archivist logs` lists it.")],
    as_json: JsonOpt = False,
) -> None:
    """Show everything logged about one turn."""
    _show_turn(turn_id, as_json)


def _show_turn(turn_id: int, as_json: bool) -> None:
    from archivist.turnlog import TurnLog, details

    turn = TurnLog(_settings().log_path).get(turn_id)
    if turn is None:
        raise ArchivistError(f"No turn {turn_id} in the log.", "List them with: archivist logs")
    if as_json:
        _print_json(turn)
    else:
        print(printable(details(turn)))


# Typer shows a value's Python type where help expects a placeholder (`--store <str>`,
# `--model <list[str]>`, `-k <int range>`): name what the value is instead.
