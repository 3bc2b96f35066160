"""`ask`, `search` and `chat`: questions answered from the stores."""

import shlex
import sys
from collections.abc import Callable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from archivist.cli.common import (
    GradeOpt,
    JsonOpt,
    MaxRewritesOpt,
    MaxStepsOpt,
    ModelOpt,
    NumCtxOpt,
    RerankCandidatesOpt,
    RerankOpt,
    RetrieveFirstOpt,
    StoreOpt,
    StoresOpt,
    ThinkOpt,
    ToolsOpt,
    _app,
    _missing_store,
    _models_used,
    _notice,
    _offer_pull,
    _prefetch_show,
    _print_json,
    _question,
    _rerank,
    _sample_kb,
    _settings,
    _toolset,
    app,
)
from archivist.home import ensure_home
from archivist.printable import printable, printable_name
from archivist.settings import DEFAULT_STORE
from archivist.tools.errors import (
    ArchivistError,
    OllamaUnreachable,
    StoreNotFound,
)
from archivist.tools.words import count

if TYPE_CHECKING:
    from archivist.agent.retrieval import SearchResult


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
    tools: ToolsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer one question with the agent and print it (the turn is logged)."""
    question = _question(question)  # a missing or empty question is refused before any request
    _prefetch_show(model)
    from archivist.terminal.chat import render_answer

    archivist = _app(
        max_steps=max_steps,
        num_ctx=num_ctx,
        max_rewrites=max_rewrites,
        retrieve_first=retrieve_first,
        **_rerank(rerank, rerank_candidates),
        **_toolset(tools),
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
    k: Annotated[
        int | None,
        typer.Option("-k", help="How many results (default 5, or ARCHIVIST_K).", min=1, max=50),
    ] = None,
    mode: Annotated[
        str | None,
        typer.Option(
            metavar="MODE",
            help="hybrid, dense, or sparse: keywords (BM25) alone, which needs no Ollama "
            "(default hybrid, or ARCHIVIST_SEARCH_MODE).",
        ),
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(
            help="Only this file or folder (its name or path) or root (its label); failing "
            "those, the files whose names begin with it."
        ),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(help="Drop results whose score (as --json shows it) is below this."),
    ] = None,
    mmr: Annotated[
        float | None,
        typer.Option(
            help="Reorder for diversity: 1 = relevance only, 0 = diversity only.", min=0, max=1
        ),
    ] = None,
    rerank: RerankOpt = None,
    rerank_candidates: RerankCandidatesOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Search a store: its best passages for QUERY, best first (the agent's search alone)."""
    archivist = _app(**_rerank(rerank, rerank_candidates))
    request = archivist.search_request(k=k, mode=mode, source=source, min_score=min_score, mmr=mmr)
    sparse = request.mode == "sparse"  # asks Ollama for nothing
    embedder = [] if sparse else [archivist.settings.embed_model]
    _offer_pull(archivist.settings, _models_used(archivist.settings, *embedder), as_json)
    try:
        results = archivist.search(query, store, request=request)
    except StoreNotFound as exc:
        raise _missing_store(exc, store) from None
    except OllamaUnreachable as exc:
        if sparse or archivist.settings.rerank_model:
            raise
        raise OllamaUnreachable(
            exc.message,
            f"{exc.fix}\nKeyword search (BM25) needs no Ollama: archivist search "
            f"{shlex.quote(query)} --store {store} --mode sparse",
        ) from None
    if source is not None:
        from archivist.agent.retrieval import ambiguity_note

        if note := ambiguity_note(source, archivist.store(store).match_sources(source).places):
            _notice(f"Note: {note}")
    line = rerank_line(results)
    if as_json:
        if line:
            _notice(line)
        _print_json(results.passages)
        return
    if line:
        print(line + "\n")
    from archivist.render import place_text, relevance_text

    for r in results:
        print(f"[{r['rank']}] {place_text(r)}{relevance_text(r)}\n{printable(r['text'])}\n")
    if not results:
        print("No matching passages.")


def rerank_line(results: "SearchResult") -> str | None:
    """Say what reranking a search's results cost: `reranked by M · 812 ms`."""
    if results.reranked_by is None:
        return None
    return f"reranked by {printable_name(results.reranked_by)} · {results.rerank_ms:.0f} ms"


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
    tools: ToolsOpt = None,
) -> None:
    """Chat with the agent in the terminal; conversations are kept and can be resumed."""
    from archivist.terminal.chat import PlainView, StartFailed, chat_loop, stdin_reader

    if resume and thread:
        raise ArchivistError("--resume and --thread both name a conversation.", "Give one.")
    _prefetch_show(model)
    settings = _settings(
        max_steps=max_steps,
        num_ctx=num_ctx,
        max_rewrites=max_rewrites,
        retrieve_first=retrieve_first,
        **_rerank(rerank, rerank_candidates),
        **_toolset(tools),
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

        from archivist.terminal.screen import RichView, keys_unechoed, prompt_reader

        view = RichView(Console(highlight=False), show_thinking)
        say = view.info
        quiet = keys_unechoed(sys.stdin)
    else:
        view = PlainView(sys.stdout, sys.stderr, show_thinking)
        say = _notice
        quiet = nullcontext()
    starting = None
    if early:
        from archivist.terminal.starting import Starting

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
        with quiet:
            status = chat_loop(conversation, read, view)
    except StartFailed as failed:
        raise failed.error from None
    finally:
        if starting is not None:
            starting.join()
        for closable in reversed(opened):
            closable.close()
    raise typer.Exit(status)


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

    from archivist.ingest.request import IngestRequest
    from archivist.terminal.conversation import Conversation

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
