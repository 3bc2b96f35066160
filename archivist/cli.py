"""The command line: parse, call the application, render. Heavy imports happen per command."""

import atexit
import copy
import functools
import json
import os
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
import typer.main

from archivist.home import ensure_home, private_umask
from archivist.printable import escape_json_controls, printable, printable_name
from archivist.settings import DEFAULT_STORE, Settings, load_settings
from archivist.tools.errors import ArchivistError, StoreDamaged, StoreNotFound
from archivist.words import count, number

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

    def close(self) -> None:
        # Flush and unlock the embedded store now rather than leave it to the exit hook.
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
    from archivist import prefetch

    settings = _settings()
    prefetch.start_show(settings.ollama_host, model or settings.chat_model, settings.timeout)


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
    from archivist import prefetch

    missing = prefetch.missing(settings.ollama_host, names, settings.timeout)
    if missing:
        from archivist.pull import offer_pull

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


@app.command()
def ingest(
    paths: Annotated[
        list[str], typer.Argument(help="Files, folders and web pages or sites (URLs) to ingest.")
    ],
    store: StoreOpt,
    prune: Annotated[bool, typer.Option(help="Remove sources that no longer exist.")] = False,
    description: Annotated[
        str | None, typer.Option(help="What the store holds, told to the model.")
    ] = None,
    embed_model: EmbedOpt = None,
    reindex: Annotated[
        bool,
        typer.Option(
            help="Rebuild a store made with another embedding model (swapped in when done)."
        ),
    ] = False,
    chunk_size: Annotated[
        int | None,
        typer.Option(help="Characters per chunk (CJK text: half). Default: 1000, or what fits."),
    ] = None,
    chunk_overlap: Annotated[
        int | None, typer.Option(help="Characters shared by neighbouring chunks. Default: 150.")
    ] = None,
    batch_size: Annotated[
        int | None, typer.Option(min=1, help="Chunks per embedding request. Default: 64.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option(min=1, help="Embedding requests in flight at once. Default: 4.")
    ] = None,
    text_field: Annotated[
        str | None,
        typer.Option(help="JSON/JSONL/CSV field holding the text. Default: text, content, body."),
    ] = None,
    id_field: Annotated[
        str | None, typer.Option(help="JSON/JSONL/CSV field naming a record (file#id).")
    ] = None,
    shard: Annotated[
        str | None,
        typer.Option(
            help="Only part i of N of the sources (e.g. 2/3), by a stable hash of their names: "
            "N machines ingest one corpus into one Qdrant server without overlap."
        ),
    ] = None,
    wait: WaitOpt = None,
    text_ext: Annotated[
        list[str] | None,
        typer.Option(
            "--text-ext",
            metavar="EXTS",
            help="Also ingest files with these extensions as plain text (e.g. .py,.toml).",
        ),
    ] = None,
    loader: Annotated[
        list[str] | None,
        typer.Option(
            "--loader",
            metavar="PATTERN=CLASS",
            help="A LangChain document loader for a file pattern: 'PATTERN=module:Class' "
            "(e.g. '*.xml=langchain_community.document_loaders:UnstructuredXMLLoader').",
        ),
    ] = None,
    include: Annotated[
        list[str] | None,
        typer.Option(
            metavar="GLOB", help="Only files matching this glob (gitignore syntax; repeatable)."
        ),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option(
            metavar="GLOB", help="Leave out files and folders matching this glob (repeatable)."
        ),
    ] = None,
    allow_chat_embedder: Annotated[
        bool,
        typer.Option(
            "--allow-chat-embedder",
            help="Embed with a model Ollama does not list as an embedding model.",
        ),
    ] = False,
    max_pages: Annotated[
        int | None,
        typer.Option(metavar="N", help="Pages read at most from each URL's site. Default: 200."),
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option(
            metavar="N", help="Links followed at most from each URL (no sitemap). Default: 10."
        ),
    ] = None,
    load_timeout: Annotated[
        float | None,
        typer.Option(
            metavar="SECONDS",
            help="Seconds one file's load may take before the file fails and the rest go on "
            "(0: no limit). Default: ARCHIVIST_LOAD_TIMEOUT, else 120.",
        ),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="List every skipped file with its reason.")
    ] = False,
    watch: Annotated[
        bool,
        typer.Option("--watch", help="Then keep the store in sync as files change, until Ctrl-C."),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files, folders and web sites into a store; unchanged files are skipped."""
    from archivist.ingest.request import IngestRequest
    from archivist.progress import IngestProgress

    request = IngestRequest.build(
        [str(p) for p in paths],
        store,
        prune=prune,
        description=description,
        reindex=reindex,
        chunk_size=chunk_size,
        chunk_overlap=chunk_overlap,
        batch_size=batch_size,
        concurrency=concurrency,
        text_field=text_field,
        id_field=id_field,
        shard=shard,
        text_extensions=text_ext or (),
        loaders=loader or (),
        include=include or (),
        exclude=exclude or (),
        allow_chat_embedder=allow_chat_embedder,
        max_pages=max_pages,
        max_depth=max_depth,
        load_timeout=load_timeout,
    )
    archivist = _app(embed_model=embed_model, store_wait=wait)
    progress = IngestProgress(enabled=not as_json, live=sys.stderr.isatty())
    try:
        with progress:
            # Released at the end: closing indexes what was written, part of the run's time.
            report = archivist.ingest(request, on_progress=progress.update, release=True)
    except KeyboardInterrupt:
        archivist.close()
        _notice(
            f"Interrupted: {count(progress.stored_count, 'document')} stored in this run "
            f"{'is' if progress.stored_count == 1 else 'are'} kept. "
            "Run the same command again to resume; finished files are not embedded again."
        )
        raise typer.Exit(130) from None
    if as_json:
        _print_json(report.to_dict())
    else:
        rebuilt = (
            " (rebuilt for the current embedding model and BM25 scheme)" if report.reindexed else ""
        )
        part = f" (shard {report.shard})" if report.shard else ""
        removed = len(report.removed)
        print(
            f"{store}{part}{rebuilt}: {count(len(report.stored), 'file')} stored, "
            f"{number(len(report.unchanged))} unchanged, {number(len(report.failed))} failed, "
            f"{number(len(report.skipped))} skipped, {number(removed)} removed"
            f"{' (no longer present)' if removed else ''}; "
            f"{count(report.chunks_embedded, 'chunk')} embedded in {report.seconds:g} s; "
            f"{count(report.points, 'chunk')} in the store."
        )
        for line in skip_summary(report.skipped, verbose):
            print(line)
        for failure in report.failed:
            print(f"  failed: {printable_name(failure['source'])}: {printable(failure['reason'])}")
        if report.renamed:
            print(
                f"  {count(len(report.renamed), 'source')} renamed with its root's label "
                "(the store has several roots); nothing embedded again."
            )
    if report.chunks_embedded:
        from archivist.stores import store_language_notice

        if notice := store_language_notice(archivist.store(store)):
            _notice(notice)
    if watch:
        _watch(archivist, [store], as_json)
    if report.failed:
        raise typer.Exit(1)


@app.command()
def sync(
    stores: Annotated[
        list[str] | None,
        typer.Option("--store", "-s", help="A store to sync (repeatable). Default: all."),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Keep syncing as files change, until Ctrl-C.")
    ] = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring every root the stores record up to date with its recorded options: new and
    changed files embedded, deleted ones removed, nothing else touched."""
    archivist = _app(store_wait=wait)
    targets = archivist.recorded_roots(stores or [])
    archivist.close()
    if not targets:
        names = ", ".join(stores) if stores else "any store"
        raise ArchivistError(
            f"No roots recorded in {names}: nothing to sync.",
            "Ingest a folder first: archivist ingest PATH --store NAME",
        )
    reports, failed = [], False
    for store, root in targets:
        try:
            request = archivist.sync_request(store, root)
            report = archivist.ingest(request, release=True)
        except ArchivistError as exc:
            failed = True
            if as_json:
                reports.append({"store": store, "root": root.location, "error": exc.message})
            else:
                _notice(f"Error: {exc}")
            continue
        failed = failed or bool(report.failed)
        if as_json:
            reports.append({"root": root.location, **report.to_dict()})
        else:
            _print_sync_report(root, report)
    if as_json:
        _print_json(reports)
    if watch:
        _watch(archivist, sorted({store for store, _ in targets}), as_json)
    if failed:
        raise typer.Exit(1)


def _print_sync_report(root: Any, report: Any) -> None:
    print(
        f"{report.store} {printable_name(root.label)}: {count(len(report.stored), 'file')} "
        f"stored, {number(len(report.unchanged))} unchanged, {number(len(report.failed))} "
        f"failed, {number(len(report.removed))} removed."
    )
    for failure in report.failed:
        print(f"  failed: {printable_name(failure['source'])}: {printable(failure['reason'])}")


def _watch(archivist: Any, stores: list[str], as_json: bool = False) -> None:
    """Keep the stores' roots in sync until Ctrl-C, a line per change."""
    from archivist.watching import Watcher

    def say(line: str) -> None:
        if as_json:  # stdout holds the one JSON document already printed
            _notice(line)
        else:
            print(printable(line), flush=True)

    def ready(roots: int) -> None:
        _notice(f"Watching {count(roots, 'root')} of {', '.join(stores)} (Ctrl-C stops).")

    watcher = Watcher(archivist, stores, say, on_ready=ready)
    watcher.run()  # returns on Ctrl-C, once what was being stored is whole
    _notice(f"Stopped watching: {count(watcher.changes, 'change')} synced.")


def skip_summary(skipped: list[dict[str, str]], verbose: bool = False) -> list[str]:
    """Group skipped files by reason, commonest first (`6,225 skipped: …`); verbose, list
    each file under its reason."""
    groups: dict[str, list[str]] = {}
    for item in skipped:
        groups.setdefault(item["reason"], []).append(item["source"])
    lines = []
    for reason, sources in sorted(groups.items(), key=lambda g: (-len(g[1]), g[0])):
        lines.append(f"  {number(len(sources))} skipped: {reason}")
        if verbose:
            lines += [f"    {source}" for source in sources]
    if groups and not verbose:
        lines.append("  (--verbose lists the skipped files)")
    return lines


@app.command()
def ask(
    question: Annotated[
        str | None,
        typer.Argument(help="The question; - reads it from stdin (as does a pipe without one)."),
    ] = None,
    stores: StoresOpt = None,
    model: ModelOpt = None,
    think: ThinkOpt = None,
    max_steps: MaxStepsOpt = None,
    num_ctx: NumCtxOpt = None,
    grade: GradeOpt = None,
    max_rewrites: MaxRewritesOpt = None,
    retrieve_first: RetrieveFirstOpt = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer one question with the agent and print it (the turn is logged)."""
    question = _question(question)  # a missing or empty question is refused before any request
    _prefetch_show(model)
    from archivist.chat import render_answer

    archivist = _app(
        max_steps=max_steps,
        num_ctx=num_ctx,
        max_rewrites=max_rewrites,
        retrieve_first=retrieve_first,
        **_rerank(rerank, rerank_candidates),
    )
    settings = archivist.settings
    used = _models_used(settings, model or settings.chat_model, settings.embed_model)
    _offer_pull(settings, used, as_json)
    names = stores or [DEFAULT_STORE]

    from archivist.render import notice_text
    from archivist.tools.progress import Event, Retried

    def retries(event: Event) -> None:
        if isinstance(event, Retried):
            _notice(notice_text(event))

    try:
        result = archivist.ask(question, names, model, think, grade, on_event=retries)
    except StoreNotFound as exc:
        raise _missing_store(exc, names[0] if len(names) == 1 else "") from None
    if as_json:
        _print_json(result)
        return
    for note in result["notes"]:
        _notice(f"Note: {note}")
    print(printable(render_answer(result)))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    store: StoreOpt = DEFAULT_STORE,
    k: Annotated[int | None, typer.Option("-k", help="How many results.", min=1, max=50)] = None,
    mode: Annotated[str | None, typer.Option(help="hybrid, dense or sparse.")] = None,
    source: Annotated[
        str | None, typer.Option(help="Only this source: a file name, folder or name prefix.")
    ] = None,
    min_score: Annotated[
        float | None, typer.Option(help="Drop results scoring below this (in the mode's score).")
    ] = None,
    mmr: Annotated[
        float | None,
        typer.Option(
            help="Re-rank for diversity: 1 = relevance only, 0 = diversity only.", min=0, max=1
        ),
    ] = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run the store's retrieval tool alone."""
    if mode not in (None, "hybrid", "dense", "sparse"):
        raise ArchivistError(f"Unknown mode '{mode}'.", "Use --mode hybrid, dense or sparse.")
    archivist = _app(**_rerank(rerank, rerank_candidates))
    _offer_pull(
        archivist.settings,
        _models_used(archivist.settings, archivist.settings.embed_model),
        as_json,
    )
    try:
        results = archivist.search(query, store, k, mode, source, min_score, mmr)
    except StoreNotFound as exc:
        raise _missing_store(exc, store) from None
    line = rerank_line(results)
    if as_json:
        if line:
            _notice(line)
        _print_json(results)
        return
    if line:
        print(line + "\n")
    from archivist.render import place_text

    for r in results:
        reranked = f", relevance {r['rerank_score']:.2f}" if "rerank_score" in r else ""
        score = f"score {r['score']:.3f}{reranked}"
        print(f"[{r['rank']}] {place_text(r)} ({score})\n{printable(r['text'])}\n")
    if not results:
        print("No matching passages.")


def rerank_line(results: Any) -> str | None:
    """Say what reranking a search's results cost: `reranked by M · 20 candidates · 812 ms`."""
    rerank = sys.modules.get("archivist.agent.rerank")  # none reranked if it was never imported
    if rerank is None or not isinstance(results, rerank.Reranked):
        return None
    return f"reranked by {printable_name(results.model)} · {results.ms:.0f} ms"


@app.command()
def chat(
    stores: StoresOpt = None,
    model: ModelOpt = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the last conversation.")
    ] = False,
    thread: Annotated[
        str | None, typer.Option("--thread", help="Continue (or start) the conversation ID.")
    ] = None,
    think: ThinkOpt = None,
    show_thinking: Annotated[
        bool, typer.Option("--show-thinking", help="Show the model's reasoning as it thinks.")
    ] = False,
    max_steps: MaxStepsOpt = None,
    num_ctx: NumCtxOpt = None,
    grade: GradeOpt = None,
    max_rewrites: MaxRewritesOpt = None,
    retrieve_first: RetrieveFirstOpt = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
) -> None:
    """Chat with the agent in the terminal; conversations are kept and can be resumed."""
    from archivist.chat import PlainView, StartFailed, chat_loop, stdin_reader

    if resume and thread:
        raise ArchivistError("--resume and --thread both name a conversation.", "Give one.")
    _prefetch_show(model)
    settings = _settings(
        max_steps=max_steps,
        num_ctx=num_ctx,
        max_rewrites=max_rewrites,
        retrieve_first=retrieve_first,
        **_rerank(rerank, rerank_candidates),
    )
    chat_model = model or settings.chat_model
    names = stores or [DEFAULT_STORE]
    terminal = sys.stdin.isatty() and sys.stdout.isatty()
    # The prompt comes first, the agent being built behind it, when Ollama has the models: a
    # failure it can still meet (a store missing) ends the chat as soon as it is known.
    # Otherwise the build comes first, so Ollama down or a model missing ends the chat before
    # any prompt (docs/chat.md).
    early = terminal and _offer_pull(
        settings, _models_used(settings, chat_model, settings.embed_model)
    )
    opened: list[Any] = []  # the application and the conversations' database, closed last

    def build(say: Callable[[str], None]) -> tuple[Any, list[str]]:
        return _build_chat(names, model, think, grade, resume, thread, opened, say, terminal)

    if terminal:
        from rich.console import Console

        from archivist.terminal import RichView, prompt_reader

        view = RichView(Console(highlight=False), show_thinking)
        say = view.info
    else:
        view = PlainView(sys.stdout, sys.stderr, show_thinking)
        say = _notice
    starting = None
    if early:
        from archivist.starting import Starting

        conversation = starting = Starting(build, say)
        say(f"Archivist · starting {chat_model}…")
        starting.start()
    else:
        conversation, ready = build(say)
        for line in ready:
            say(line)
    read = (
        prompt_reader(settings.input_history_path, starting)
        if terminal
        else stdin_reader(sys.stdin)
    )
    try:
        status = chat_loop(conversation, read, view)
    except StartFailed as failed:
        raise failed.error from None
    finally:
        if starting is not None:
            starting.join()
        for closable in reversed(opened):
            closable.close()
    raise typer.Exit(status)


def _count_or_damaged(store: Any) -> int | None:
    """A store's chunks, or None for a damaged store (which can still be deleted)."""
    try:
        return store.count()
    except StoreDamaged:
        return None


def _sample_missing(store: Any) -> str:
    """Why the sample store must be ingested ('' if it need not): it does not exist, or an
    ingest stopped before finishing it (killed on a first chat: no chunks, or a document
    stored in part), which the same ingest completes."""
    if not store.exists():
        return "is empty"
    if store.count() == 0:
        return "holds no chunks (its first ingest was stopped)"
    if any(not info.complete for info in store.sources().values()):
        return "was left half-stored (its ingest was stopped)"
    return ""


def _build_chat(
    names: list[str],
    model: str | None,
    think: bool | None,
    grade: bool | None,
    resume: bool,
    thread: str | None,
    opened: list[Any],
    say: Callable[[str], None],
    terminal: bool,
) -> tuple[Any, list[str]]:
    """Open the application and build the conversation, ingesting the sample on first use;
    return it and the lines that introduce it (the banner in a terminal, notices, a resume)."""
    import sqlite3

    from langgraph.checkpoint.sqlite import SqliteSaver

    from archivist.conversation import Conversation
    from archivist.ingest.request import IngestRequest

    archivist = _app()
    opened.append(archivist)
    settings = archivist.settings
    sample_needed = names == [DEFAULT_STORE] and _sample_kb().is_dir()
    why = ""
    if sample_needed:
        why = _sample_missing(archivist.store(DEFAULT_STORE, must_exist=False))
    if why:
        say(f"The store '{DEFAULT_STORE}' {why}: ingesting the sample knowledge base…")
        sample = IngestRequest.build(
            [str(_sample_kb())],
            DEFAULT_STORE,
            description="policies of the Northwind Outfitters shop",
        )
        archivist.ingest(sample)
    earlier = None
    if resume:
        earlier = archivist.turn_log.last_thread("chat")
        if earlier is None:
            say("There is no earlier conversation to resume: starting a new one.")
    ensure_home(settings.home)
    db = sqlite3.connect(settings.threads_path, check_same_thread=False)
    opened.append(db)
    conversation = Conversation(
        archivist, names, SqliteSaver(db), model, think, earlier or thread, grade
    )
    lines = [f"Archivist · {conversation.describe()} · /help for commands"] if terminal else []
    lines += conversation.setup.notices
    if history := conversation.messages():
        questions = sum(1 for m in history if m.type == "human")
        earlier_questions = count(questions, "earlier question")
        lines.append(f"Resuming conversation {conversation.thread_id}: {earlier_questions}.")
    return conversation, lines


@app.command(name="eval")
def evaluate(
    dataset: Annotated[Path, typer.Argument(help="The cases: a JSONL file, one case a line.")],
    stores: Annotated[
        list[str], typer.Option("--store", "-s", help="A store the agent searches (repeatable).")
    ],
    models: Annotated[
        list[str] | None,
        typer.Option("--model", "-m", help="An Ollama chat model to evaluate (repeatable)."),
    ] = None,
    repeat: Annotated[
        int, typer.Option(min=1, help="Runs per case and model, to measure stability.")
    ] = 1,
    k: Annotated[
        int, typer.Option("--k", "-k", min=1, help="Passages per search, and the @k cutoff.")
    ] = 5,
    out: Annotated[
        Path | None,
        typer.Option(
            help="Folder for report.json, report.md and chart.png. Default: "
            "eval-reports/DATASET-YYYYMMDD-HHMMSS in the current folder."
        ),
    ] = None,
    judge: Annotated[
        str | None, typer.Option(help="An Ollama model that judges the answers (LLM-as-judge).")
    ] = None,
    seed: Annotated[int, typer.Option(help="The sampling seed sent with every request.")] = 42,
    grade: Annotated[
        str | None,
        typer.Option(
            help="Grade retrieved passages: off, on, or both (every model twice, labelled "
            "MODEL and MODEL+grade). Default: ARCHIVIST_GRADE (off).",
        ),
    ] = None,
    max_rewrites: MaxRewritesOpt = None,
    retrieve_first: RetrieveFirstOpt = None,
    embed_models: Annotated[
        list[str] | None,
        typer.Option(
            "--embed-model",
            help="An Ollama embedding model to compare on retrieval (repeatable): the store's "
            "chunks are embedded by each into a store of their own, reused on later runs.",
        ),
    ] = None,
    rerank: Annotated[
        str | None,
        typer.Option(
            "--rerank",
            metavar="MODEL",
            help="Compare reranking by this Ollama model with none, in one run: every model "
            "also runs as MODEL+rerank, and the searches alone are scored both ways. "
            "Default: ARCHIVIST_RERANK_MODEL; 'off' turns it off.",
        ),
    ] = None,
    rerank_candidates: RerankCandidatesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare chat models on the same cases: tool use, retrieval, answers, latency; and, with
    --embed-model, embedding models on retrieval. `archivist eval generate` writes the cases
    from a store."""
    from datetime import datetime

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from archivist.evaluation.report import (
        CHAT_EMBEDDER_NOTE,
        embedder_table,
        never_searched_note,
        rerank_table,
        table,
        text_call_note,
        write_report,
    )
    from archivist.evaluation.run import evaluate as run_evaluation
    from archivist.evaluation.run import load_dataset

    if grade not in (None, "off", "on", "both"):
        raise ArchivistError(f"Unknown --grade '{grade}'.", "Use --grade off, on or both.")
    cases = load_dataset(dataset)
    archivist = _app(
        k=k,
        max_rewrites=max_rewrites,
        retrieve_first=retrieve_first,
        **_rerank(rerank, rerank_candidates),
    )
    embedders = embed_models or []
    # Comparing embedders alone needs no chat model; a --model given too is evaluated as well.
    names = models or ([] if embedders else [archivist.settings.chat_model])
    grading = {"off": [False], "on": [True], "both": [False, True]}.get(
        grade or "", [archivist.settings.grade]
    )
    out = out or Path("eval-reports") / f"{dataset.stem}-{datetime.now():%Y%m%d-%H%M%S}"
    variants = 2 if archivist.settings.rerank_model else 1  # with and without reranking
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task(
            "evaluating",
            total=len(names) * len(grading) * variants * len(cases) * repeat + len(embedders),
        )

        from archivist.tools.progress import CaseRan, Event, StoreReady

        def advance(event: Event) -> None:
            match event:
                case CaseRan(label=label, case=case):
                    progress.update(task, advance=1, description=f"{label} · {case}")
                case StoreReady(model=model):
                    progress.update(task, advance=1, description=f"embedding · {model}")

        report = run_evaluation(
            archivist,
            dataset,
            cases,
            stores,
            names,
            repeat,
            seed,
            judge,
            on_progress=advance,
            grading=grading,
            embed_models=embedders,
        )
    paths = write_report(report, out)
    if as_json:
        _print_json(report)
    else:
        console = Console()
        # Piped into a file, keep the table whole instead of Rich's 80-column default.
        console = console if console.is_terminal else Console(width=160)
        if report["embedders"]:
            console.print(embedder_table(report))
        if report["reranking"]:
            console.print(rerank_table(report))
        if report["models"]:
            console.print(table(report))
    for summary in report["embedders"]:
        if summary["chat_model"]:
            _notice(CHAT_EMBEDDER_NOTE.format(label=summary["embed_model"]).replace("**", ""))
    for name, mode, tools in dict.fromkeys(
        (s["model"], s["mode"], s.get("tools")) for s in report["models"]
    ):
        if mode != "agent" and tools:
            _notice(f"{name}: evaluated in {mode} mode (--retrieve-first).")
        elif mode != "agent":
            _notice(f"{name} cannot call tools: evaluated in {mode} mode.")
    for summary in report["models"]:
        if note := text_call_note(summary):
            _notice(note.replace("**", ""))
        if note := never_searched_note(summary, report["k"]):
            _notice(note.replace("**", ""))
    _notice("Report: " + ", ".join(str(path) for path in paths.values()))


@app.command(name=GENERATE)
def eval_generate(
    store: StoreOpt,
    n: Annotated[int, typer.Option("-n", min=1, help="How many cases to generate.")] = 40,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="The Ollama chat model that writes them.")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE", help="The JSONL file to write (default evals/STORE-generated.jsonl)."
        ),
    ] = None,
    seed: Annotated[int, typer.Option(help="Seeds the passages' sampling and the model.")] = 42,
    as_json: JsonOpt = False,
) -> None:
    """Write a test set from a store's passages: a question and an answer fragment each."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from archivist.evaluation.generate import dropped_summary, generate_from_store, meta_path

    out = out or Path("evals") / f"{store}-generated.jsonl"
    archivist = _app()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with progress:
        task = progress.add_task("generating", total=n)

        from archivist.tools.progress import Event, Generated

        def advance(event: Event) -> None:
            if isinstance(event, Generated):
                described = f"generating · {count(event.tried, 'passage')}"
                progress.update(task, completed=event.kept, description=described)

        try:
            meta = generate_from_store(archivist, store, out, n, model, seed, advance)
        except KeyboardInterrupt:
            _notice(f"Interrupted. Run the same command again to resume from {out}.")
            raise typer.Exit(130) from None
    if as_json:
        _print_json({**meta, "out": str(out)})
    kinds = meta["kinds"]
    _notice(
        f"Wrote {count(meta['cases'], 'case')} to {out}: {kinds['passage']} from passages, "
        f"{kinds['no_tool']} needing no tool, {kinds['unanswerable']} the store cannot answer."
    )
    if meta["generated"] < n:
        _notice(f"Only {meta['generated']} of {n}: the store ran out of passages.")
    _notice(dropped_summary(meta))
    _notice(f"Provenance: {meta_path(out)}. Evaluate with: archivist eval {out} --store {store}")


@app.command()
def stores(as_json: JsonOpt = False) -> None:
    """List the stores."""
    from archivist.tools.store import sparse_hint

    listing = _app().stores()
    if as_json:
        _print_json(listing)
        return
    if listing:
        print("store\tchunks\tembedding model\tBM25 scheme\tdescription")
    for s in listing:
        if s.get("damaged"):
            print(f"{s['store']}\tdamaged\t-\t-\t{printable_name(s['damaged'])}")
            continue
        chunks = count(s["chunks"], "chunk")
        description = printable_name(s["description"])
        print(f"{s['store']}\t{chunks}\t{s['embed_model']}\t{s['sparse']}\t{description}")
    if not listing:
        print("No stores yet. Create one with: archivist ingest PATH --store NAME")
    for s in listing:
        if s.get("damaged"):
            _notice(f"Store '{s['store']}' is damaged: {s['damaged']}. {s['fix']}")
            continue
        hint = sparse_hint(s["store"], s["sparse"])
        if hint:
            _notice(hint)
        if s.get("embedding_notice"):
            _notice(s["embedding_notice"])


@app.command()
def sources(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """List a store's sources by root, each with its chunks and its status against the disk:
    ok, changed, deleted, new (not yet stored), failed (with why), or unknown (no root)."""
    from archivist.ingest.status import STATUSES, store_status

    archivist = _app()
    opened = archivist.store(store)
    with archivist.released_on_failure():
        listing = store_status(opened)
    rows = [row for status in listing for row in status.sources]
    if as_json:
        _print_json(rows)
        return
    totals = {status: 0 for status in STATUSES}
    for status in listing:
        counts = status.counts()
        for key, value in counts.items():
            totals[key] += value
        where = (
            f"{printable_name(status.root.location)} ({printable_name(status.root.label)})"
            if status.root is not None
            else "sources with no recorded root (ingest their folder again to record it)"
        )
        lines = [f"{where}: {_status_counts(counts)}"]
        for row in status.sources:
            chunks, when = count(row["chunks"], "chunk"), row["ingested_at"] or "-"
            line = f"  {row['status']}\t{printable_name(row['source'])}\t{chunks}\t{when}"
            if row.get("reason"):
                line += f"\t{printable(row['reason'])}"
            lines.append(line)
        print("\n".join(lines))  # one write for thousands of sources
    roots = sum(1 for status in listing if status.root is not None)
    print(
        f"{store}: {count(len(rows), 'source')} in {count(roots, 'root')}: "
        f"{_status_counts(totals)}"
        + (
            f". Bring it up to date with: archivist sync --store {store}"
            if any(totals[k] for k in ("changed", "deleted", "new"))
            else ""
        )
    )


def _status_counts(counts: dict[str, int]) -> str:
    shown = [f"{number(n)} {status}" for status, n in counts.items() if n or status == "ok"]
    return ", ".join(shown)


@app.command()
def delete(
    store: StoreOpt,
    source: Annotated[
        str | None,
        typer.Option(help="The source to remove, as `sources` lists it. Without it: the store."),
    ] = None,
    root: Annotated[
        str | None,
        typer.Option(
            help="A root to remove with all its sources: its label or path, as `sources` lists it."
        ),
    ] = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete a whole store or root without asking.")
    ] = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Remove one source's chunks from a store, one root and its sources, or the whole store
    (a root or a store after a confirmation)."""
    archivist = _app(store_wait=wait)
    if source is not None and root is not None:
        raise ArchivistError("--source and --root both say what to remove.", "Give one.")
    if root is not None:
        from archivist.ingest.roots import RootSet

        found = RootSet.of(archivist.store(store).info()).find(root)
        if found is not None and not yes:
            what = f"the root {printable_name(found.location)} ({printable_name(found.label)})"
            if not _interactive(as_json):
                raise ArchivistError(
                    f"Removing {what} from '{store}' needs a confirmation, and there is no "
                    "terminal to ask in.",
                    f"Add --yes: archivist delete --store {store} --root {root} --yes",
                )
            if not typer.confirm(f"Remove {what} and all its sources from '{store}'?", err=True):
                _notice("Nothing was deleted.")
                raise typer.Exit(1)
        done = archivist.delete_root(store, root)
        if as_json:
            _print_json({"store": store, **done})
        else:
            print(
                f"Removed the root {printable_name(done['root'])} from {store} "
                f"({count(done['chunks'], 'chunk')})."
            )
            if done["renamed"]:
                print(f"  {count(len(done['renamed']), 'source')} renamed without its label.")
        return
    if source is not None:
        name = archivist.store(store).find_source(source)
        removed = archivist.delete_source(store, name) if name is not None else 0
        if not removed:
            raise ArchivistError(
                f"Store '{store}' has no source '{source}'.",
                f"List its sources with: archivist sources --store {store}",
            )
        done = f"Removed {count(removed, 'chunk')} of {printable_name(name)} from {store}."
    else:
        target = archivist.store(store, must_exist=False)
        if not target.exists():
            raise StoreNotFound(
                f"There is no store named '{store}'.", "List the stores with: archivist stores"
            )
        removed = _count_or_damaged(target)
        if not yes:
            if not _interactive(as_json):
                raise ArchivistError(
                    f"Deleting the whole store '{store}' needs a confirmation, and there is no "
                    "terminal to ask in.",
                    f"Add --yes: archivist delete --store {store} --yes",
                )
            if not typer.confirm(
                f"Delete the store '{store}' and its "
                f"{'damaged files' if removed is None else count(removed, 'chunk')}?",
                err=True,
            ):
                _notice("Nothing was deleted.")
                raise typer.Exit(1)
        with archivist.writing():
            # Counted again once writing: an ingest waited for may have stored more.
            removed = _count_or_damaged(target)
            target.drop()
        held = "damaged" if removed is None else count(removed, "chunk")
        done = f"Deleted the store '{store}' ({held})."
    if as_json:
        _print_json({"store": store, "source": source, "chunks": removed})
    else:
        print(done)


@app.command()
def migrate(
    to_url: Annotated[
        str | None, typer.Option(help="Copy to this Qdrant server or cluster (http://host:6333).")
    ] = None,
    to_home: Annotated[
        Path | None, typer.Option(help="Copy to the embedded store of this Archivist home.")
    ] = None,
    from_home: Annotated[
        Path | None,
        typer.Option(help="Copy from the embedded store of this home. Default: ARCHIVIST_HOME."),
    ] = None,
    from_url: Annotated[
        str | None, typer.Option(help="Copy from this Qdrant server instead of a home.")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(help="The target server's API key. Default: QDRANT_API_KEY.")
    ] = None,
    from_api_key: Annotated[str | None, typer.Option(help="The source server's API key.")] = None,
    stores: Annotated[
        list[str] | None,
        typer.Option("--store", "-s", help="A store to copy (repeatable). Default: all."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Replace target stores that already hold chunks.")
    ] = False,
    batch: Annotated[int, typer.Option(min=1, help="Points per upsert request.")] = 256,
    grpc: Annotated[bool, typer.Option(help="Speak gRPC to the servers (port 6334).")] = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Copy stores to a Qdrant server (or another home) without embedding anything again."""
    from grpc import RpcError
    from qdrant_client.http.exceptions import ApiException

    from archivist.settings import mask_url
    from archivist.tools.engine import writing
    from archivist.tools.migrate import copy_stores
    from archivist.tools.store import connect

    settings = _settings()
    if (to_url is None) == (to_home is None):
        raise ArchivistError("Say where to copy to.", "Give one of --to-url URL or --to-home PATH.")
    if from_url and from_home:
        raise ArchivistError("Say where to copy from.", "Give --from-home or --from-url, not both.")
    source_home = None if from_url else (from_home or settings.home).expanduser()
    if to_home and source_home and to_home.expanduser().resolve() == source_home.resolve():
        raise ArchivistError("The source and the target are the same home.", "Choose another.")
    if to_url and from_url and to_url.rstrip("/") == from_url.rstrip("/"):
        raise ArchivistError("The source and the target are the same server.", "Choose another.")
    if api_key or from_api_key:
        _notice(
            "Note: an API key given on the command line is visible to every user of this "
            "machine in the process list; set QDRANT_API_KEY in the environment instead."
        )
    origin = mask_url(from_url) if from_url else str(source_home)
    destination = mask_url(to_url) if to_url else str(to_home)

    from archivist.tools.progress import Copied, Event

    def progress(event: Event) -> None:
        if isinstance(event, Copied) and event.chunks == event.total:
            _notice(f"{event.store}: {count(event.chunks, 'chunk')} copied.")

    source = target = None
    try:
        if source_home is not None:
            source_settings = settings.with_overrides(home=source_home.expanduser())
            if not (
                source_settings.store_path.is_dir() or source_settings.legacy_store_path.is_dir()
            ):
                raise ArchivistError(
                    f"There is no embedded store in {source_home}.",
                    "Give the folder ARCHIVIST_HOME pointed at (it holds an `edge` folder).",
                )
            source = connect(
                source_settings.store_path,
                legacy_path=source_settings.legacy_store_path,
                wait=wait,
            )
        else:
            source = connect(url=from_url, api_key=from_api_key, prefer_grpc=grpc, timeout=60)
        if to_home is not None:
            target = connect(
                settings.with_overrides(home=to_home.expanduser()).store_path, wait=wait
            )
            layout = None
        else:
            key = api_key or settings.qdrant_api_key
            target = connect(url=to_url, api_key=key, prefer_grpc=grpc, timeout=60)
            layout = settings.with_overrides(qdrant_url=to_url).server_layout
        with writing(target):
            copied = copy_stores(
                source, target, stores or [], layout, batch, force, None if as_json else progress
            )
    except (ApiException, RpcError, OSError) as exc:
        raise ArchivistError(
            f"Cannot copy from {origin} to {destination}: {exc}",
            "Check that the Qdrant server runs at that address (its /readyz answers) and the "
            "API key (--api-key, QDRANT_API_KEY).",
        ) from None
    finally:
        for client in (source, target):
            if client is not None:
                client.close()
    if as_json:
        _print_json({"from": origin, "to": destination, "stores": copied})
        return
    for entry in copied:
        copied = count(entry["chunks"], "chunk")
        print(f"{entry['store']}: {copied} copied in {entry['seconds']:g} s.")
    if not copied:
        print(f"No stores in {origin}.")
    else:
        print(f"Copied to {destination}; nothing was embedded again.")


@app.command()
def mcp(
    stores: Annotated[
        list[str] | None,
        typer.Option("--store", "-s", help="A store to serve (repeatable). Default: all."),
    ] = None,
    http: Annotated[
        int | None,
        typer.Option(
            "--http",
            min=1,
            max=65535,
            help="Serve streamable HTTP at http://127.0.0.1:PORT/mcp instead of stdio.",
        ),
    ] = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
) -> None:
    """Serve the stores' search tools to MCP clients (desktop apps, IDEs), over stdio or HTTP."""
    from archivist.mcp import HTTP_PATH, StoreTools, http_socket, serve_http, serve_stdio

    tools = StoreTools(_settings(**_rerank(rerank, rerank_candidates)), stores or [])
    tools.check()
    if http is None:
        serve_stdio(tools)
        return
    sock = http_socket(http)
    _notice(f"Serving MCP at http://127.0.0.1:{http}{HTTP_PATH} (Ctrl-C stops).")
    serve_http(tools, sock)


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
    limit: Annotated[int, typer.Option("-n", "--limit", min=1, help="How many turns.")] = 20,
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
        print("No turns logged yet. They are logged by `archivist ask` and `archivist chat`.")


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


def main() -> None:
    """Run the CLI; expected failures print their fix and exit 1, without a traceback."""
    invocation = None
    private_umask()  # the home's files (stores, threads, turn log) readable by their user only
    try:
        invocation = Invocation(load_settings())
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
        from archivist.models import explain

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
        main()
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
