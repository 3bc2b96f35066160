"""The command line: parse, call the application, render. Heavy imports happen per command.

Each command lives in the module of its kind; importing them registers them on `app`, in
the order `--help` lists them."""

import atexit
import copy
import functools
import os
import sys
import threading
from typing import Any

import typer
import typer.main

from archivist.cli.common import GENERATE, Invocation, _notice, _sample_kb, app
from archivist.home import private_umask
from archivist.settings import load_settings
from archivist.tools.errors import ArchivistError

__all__ = ["app", "main", "name_metavars", "run", "_sample_kb"]

# Each command module registers its commands on `app` as it is imported: in this order, the
# order `--help` lists them.
# isort: off
from archivist.cli import ingesting  # noqa: E402, F401
from archivist.cli import asking  # noqa: E402, F401
from archivist.cli import evaluating  # noqa: E402, F401
from archivist.cli import stores  # noqa: E402, F401
from archivist.cli import serving  # noqa: E402, F401
from archivist.cli import inspecting  # noqa: E402, F401
# isort: on

METAVARS = {
    "http": "PORT",
    "store": "NAME",
    "stores": "NAME",
    "model": "MODEL",
    "models": "MODEL",
    "embed_model": "MODEL",
    "embed_models": "MODEL",
    "judge": "MODEL",
    "k": "N",
    "rerank_candidates": "N",
    "limit": "N",
    "repeat": "N",
    "seed": "N",
    "batch": "N",
    "batch_size": "N",
    "concurrency": "N",
    "max_steps": "N",
    "max_rewrites": "N",
    "num_ctx": "TOKENS",
    "chunk_size": "CHARS",
    "chunk_overlap": "CHARS",
    "min_score": "SCORE",
    "mmr": "WEIGHT",
    "turn_id": "ID",
    "paths": "PATH",
    "dataset": "FILE",
    "out": "DIR",
    "to_home": "DIR",
    "from_home": "DIR",
    "to_url": "URL",
    "from_url": "URL",
    "api_key": "KEY",
    "from_api_key": "KEY",
    "source": "SOURCE",
    "root": "ROOT",
    "shard": "I/N",
    "mode": "MODE",
    "grade": "off|on|both",
}


def _usage_name(param: Any) -> str:
    """An argument as a usage line shows it: `PATH...`, `QUERY`, `[QUESTION]`."""
    name = param.metavar if param.required else f"[{param.metavar}]"
    return name + ("..." if param.nargs != 1 else "")


def name_metavars(command: Any) -> Any:
    """Give every value-taking parameter of a command tree a placeholder name."""
    for param in command.params:
        if param.metavar is None and not getattr(param, "is_flag", False):
            param.metavar = METAVARS.get(param.name, param.name.upper())
        if param.param_type_name == "argument":
            # Typer writes a required argument `{PATH}` in the usage line (from 0.26), where
            # people read `PATH`; 0.29 also lists it as `PATH <list[Path]>`: the name is enough.
            param.display_type_rich = lambda ctx: None
            param.get_usage_pieces = lambda ctx, param=param: [_usage_name(param)]
    for sub in getattr(command, "commands", {}).values():
        name_metavars(sub)
    return command


def app_for(args: list[str]) -> typer.Typer:
    """`app` with just the command `args` name, else `app` itself (no command, an option first,
    a name that is no command, shell completion). Typer builds the options of every command
    it holds as it starts, ~20 ms for all of Archivist's; a command needs only its own, and
    its help, usage and errors are the same either way."""
    if not args or args[0].startswith("-") or "_ARCHIVIST_COMPLETE" in os.environ:
        return app
    return _alone(GENERATE if args[:2] == GENERATE.split() else args[0]) or app


@functools.cache
def _alone(name: str) -> typer.Typer | None:
    """`app` with the one command or group called `name` (None if there is none)."""
    commands = [
        c
        for c in app.registered_commands
        if (c.name or c.callback.__name__.lower().replace("_", "-")) == name
    ]
    groups = [g for g in app.registered_groups if g.name == name]
    if len(commands) + len(groups) != 1:
        return None
    alone = copy.copy(app)
    alone.registered_commands, alone.registered_groups = commands, groups
    return alone


def main(exits_after: bool = False) -> None:
    """Run the CLI; expected failures print their fix and exit 1, without a traceback.
    `exits_after`: the process ends with the command (`run`), its stores closed for that."""
    invocation = None
    private_umask()  # the home's files (stores, threads, turn log) readable by their user only
    try:
        invocation = Invocation(load_settings(), exits_after=exits_after)
        # `python -m archivist` too: help, errors and shell completion say `archivist`.
        command = typer.main.get_command(app_for(sys.argv[1:]))
        name_metavars(command)(prog_name="archivist", obj=invocation)
    except ArchivistError as exc:
        _notice(f"Error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        _notice("Interrupted.")
        sys.exit(130)
    except Exception as exc:
        from archivist.failures import explain

        explained = explain(exc, invocation.settings) if invocation else None
        if explained is None:
            raise
        _notice(f"Error: {explained}")
        sys.exit(1)


def run() -> None:
    """The `archivist` program (and `python -m archivist`): `main`, then an exit that skips
    the interpreter's own teardown, freeing every module and object one by one (~30 ms of
    CPU after a listing of 2,000 sources), once what an exit must do is done: the
    command's resources closed (as it returns), the exit handlers run, the output flushed.
    With another thread still running, or an exit that is not a status, Python exits as
    usual."""
    try:
        main(exits_after=True)
        code = 0
    except SystemExit as exc:
        code = exc.code
    if not (code is None or isinstance(code, int)) or any(
        t.is_alive() and not t.daemon and t is not threading.main_thread()
        for t in threading.enumerate()
    ):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: Python's own exit says what it says
        sys.exit(code)
    os._exit(code or 0)
