"""What every command shares: the Typer app, its options, the settings and facade a
command is given, and how it prints."""

import json
import sys
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from archivist.printable import escape_json_controls, printable
from archivist.settings import DEFAULT_STORE, Settings, load_settings
from archivist.tools.errors import (
    ArchivistError,
    StoreNotFound,
)

if TYPE_CHECKING:
    pass


GENERATE = "eval generate"


class Commands(typer.core.TyperGroup):
    """The top-level commands, where `eval generate …` runs the `eval generate` command: `eval`
    itself takes a dataset as its argument, so `generate` cannot be a subcommand of it."""

    def resolve_command(self, ctx, args):
        if args[:2] == GENERATE.split():
            return GENERATE, self.commands[GENERATE], args[2:]
        return super().resolve_command(ctx, args)


app = typer.Typer(
    cls=Commands,
    name="archivist",
    help="Local-first agentic RAG: ask questions answered from your own documents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rendering it with rich costs ~0.2 s of imports on every `--help`.
    rich_markup_mode=None,
)

StoreOpt = Annotated[str, typer.Option("--store", "-s", help="The store's name.")]
StoresOpt = Annotated[
    list[str] | None, typer.Option("--store", "-s", help="A store to search (repeatable).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="The Ollama chat model.")]
EmbedOpt = Annotated[str | None, typer.Option("--embed-model", help="The Ollama embedding model.")]
ThinkOpt = Annotated[
    bool | None,
    typer.Option(
        "--think/--no-think",
        help="Let a thinking model reason before answering (default: on for models that can).",
    ),
]
MaxStepsOpt = Annotated[
    int | None,
    typer.Option("--max-steps", min=1, help="Rounds of searches per question (default 6)."),
]
GradeOpt = Annotated[
    bool | None,
    typer.Option(
        "--grade/--no-grade",
        help="Grade retrieved passages with the model and rewrite searches that miss "
        "(default: off, or ARCHIVIST_GRADE).",
    ),
]
MaxRewritesOpt = Annotated[
    int | None,
    typer.Option(
        "--max-rewrites",
        min=0,
        help="With grading: rewrites of a search that found nothing relevant (default 2).",
    ),
]
WaitOpt = Annotated[
    float | None,
    typer.Option(
        "--wait",
        min=0,
        help="Seconds to wait for another process writing to the embedded store (default: "
        "as long as it takes; 0: fail at once, naming it).",
    ),
]
RetrieveFirstOpt = Annotated[
    bool | None,
    typer.Option(
        "--retrieve-first/--no-retrieve-first",
        help="Search every store before answering, even with a model that can call tools "
        "(retrieve-then-answer), for a model that does not search by itself. Default: the "
        "agent, or ARCHIVIST_RETRIEVE_FIRST.",
    ),
]
ToolsOpt = Annotated[
    str | None,
    typer.Option(
        "--tools",
        metavar="search|all",
        help="The tools each store gives the model: search (its best passages; the default, "
        "or ARCHIVIST_TOOLS), or all (search, list its sources with exact counts, read one in "
        "order). Small models choose worse among more tools (docs/documents.md).",
    ),
]
RerankOpt = Annotated[
    str | None,
    typer.Option(
        "--rerank",
        metavar="MODEL",
        help="Rerank each search's top candidates with this Ollama model's log-probabilities "
        "(a chat model, or a reranker published for Ollama; Ollama 0.12.11 or later). "
        "Default: ARCHIVIST_RERANK_MODEL; 'off' turns it off.",
    ),
]
RerankCandidatesOpt = Annotated[
    int | None,
    typer.Option(
        "--rerank-candidates",
        min=1,
        max=100,
        help="With --rerank: how many of a search's best results are scored (default 20, or "
        "ARCHIVIST_RERANK_CANDIDATES).",
    ),
]
NumCtxOpt = Annotated[
    int | None,
    typer.Option(
        "--num-ctx",
        min=512,
        help="Largest context window to use, in tokens (default 8192, or ARCHIVIST_NUM_CTX).",
    ),
]


@dataclass
class Invocation:
    """One run of the command line: its settings, with the flags a command applied, and the
    Archivists it opened, closed when the command ends, however it ends."""

    settings: Settings
    opened: list[Any] = field(default_factory=list)

    exits_after: bool = False
    """Whether the process ends with the command (the `archivist` program, not the CLI run
    in a test's process): its stores are then closed for an exit (`exit_follows`)."""

    def close(self) -> None:
        # Flush and unlock the embedded store now rather than leave it to the exit hook.
        if not self.opened:
            return
        from archivist.app import closing_for_exit

        with closing_for_exit(self.exits_after):
            while self.opened:
                self.opened.pop().close()


_invocation_var: ContextVar[Invocation] = ContextVar("invocation")
"""The command line's run in progress: set by the root callback, read by the commands (and
by work they start in threads, which run in a copy of the command's context)."""


def _invocation() -> Invocation:
    try:
        return _invocation_var.get()
    except LookupError:  # a command's helper called outside a command (a test)
        _invocation_var.set(Invocation(load_settings()))
        return _invocation_var.get()


def _rerank(model: str | None, candidates: int | None) -> dict[str, Any]:
    """The settings --rerank and --rerank-candidates override ('off' and 'none': no reranking)."""
    if model is not None and model.strip().lower() in ("off", "none", ""):
        model = ""
    return {"rerank_model": model, "rerank_candidates": candidates}


def _toolset(tools: str | None) -> dict[str, Any]:
    """The settings override `--tools` makes (checked), none when it is not given."""
    if tools is None:
        return {}
    from archivist.agent.documents import checked_toolset

    return {"tools": checked_toolset(tools)}


def _models_used(settings: Settings, *names: str | None) -> list[str]:
    """The models a command asks Ollama for: those named, and the rerank model if any."""
    return [n for n in (*names, settings.rerank_model) if n]


def _settings(**overrides: Any) -> Settings:
    invocation = _invocation()
    invocation.settings = invocation.settings.with_overrides(**overrides)
    return invocation.settings


def _app(**overrides: Any):
    from archivist.app import Archivist

    archivist = Archivist(_settings(**overrides))
    _invocation().opened.append(archivist)
    return archivist


def _prefetch_show(model: str | None) -> None:
    """Ask Ollama about the chat model now, while the agent's imports load."""
    from archivist.ollama import Ollama

    settings = _settings()
    Ollama(settings).show_soon(model or settings.chat_model)


def _print_json(data: Any) -> None:
    sys.stdout.write(escape_json_controls(json.dumps(data, ensure_ascii=False, indent=2)) + "\n")


def _notice(message: str) -> None:
    sys.stderr.write(printable(message) + "\n")


def _show_version(value: bool) -> None:
    if value:
        from archivist.version import __version__

        print(f"archivist {__version__}")
        raise typer.Exit()


@app.callback()
def options(
    ctx: typer.Context,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_show_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Local-first agentic RAG: ask questions answered from your own documents."""
    # main() hands its Invocation in; a CliRunner invoking `app` gets a new one.
    invocation = ctx.obj if isinstance(ctx.obj, Invocation) else Invocation(load_settings())
    _invocation_var.set(invocation)
    ctx.call_on_close(invocation.close)
    settings = invocation.settings
    # Traces carry questions and passages off the machine: never silently.
    if settings.tracing is not None:
        _notice(settings.tracing.notice())
    elif settings.tracing_warning:
        _notice(settings.tracing_warning)


def _sample_kb() -> Path:
    """The sample knowledge base shipped in the package (examples/shop in a checkout)."""
    from importlib.resources import files

    # A wheel installs unzipped, so the resource is a real folder on disk.
    return Path(str(files("archivist.samples").joinpath("shop")))


def _interactive(as_json: bool = False) -> bool:
    return not as_json and sys.stdin.isatty() and sys.stderr.isatty()


def _offer_pull(settings: Settings, names: list[str], as_json: bool = False) -> bool:
    """In a terminal, offer to pull the models Ollama lacks; in pipes and --json, never.

    Return whether Ollama was seen to have them all (it is asked only in a terminal).
    """
    if not _interactive(as_json):
        return False
    from archivist.ollama import Ollama

    missing = Ollama(settings).missing(names)
    if missing:
        from archivist.ollama.pull import offer_pull

        offer_pull(settings, missing)
    return missing == []


def _missing_store(exc: StoreNotFound, store: str) -> StoreNotFound:
    """On a fresh home the default store is missing: say how the sample gets there."""
    if store != DEFAULT_STORE:
        return exc
    return StoreNotFound(
        exc.message,
        "`archivist chat` ingests the sample knowledge base into it on first use; "
        f"or ingest it now: archivist ingest {_sample_kb()} --store {DEFAULT_STORE}\n"
        f"(your own documents: archivist ingest PATH --store {DEFAULT_STORE})",
    )


def _question(text: str | None) -> str:
    """The question from the argument, or from stdin for `-` (or no argument in a pipe)."""
    if text == "-" or (text is None and not sys.stdin.isatty()):
        text = sys.stdin.read()
    if text is None:
        raise ArchivistError(
            "No question given.",
            'Ask one: archivist ask "QUESTION" (or pipe it in: echo QUESTION | archivist ask -)',
        )
    if not text.strip():
        raise ArchivistError(
            "The question is empty.", 'Ask one: archivist ask "QUESTION" (or - for stdin)'
        )
    return text.strip()
