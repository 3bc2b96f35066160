"""The command line: parse, call the application, render. Heavy imports happen per command."""

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from agent.settings import DEFAULT_STORE, Settings, load_settings
from tools.errors import ArchivistError

app = typer.Typer(
    name="archivist",
    help="Local-first agentic RAG: ask questions answered from your own documents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain help: rendering it with rich costs ~0.2 s of imports on every `--help`.
    rich_markup_mode=None,
    add_completion=False,
)
SAMPLE_KB = Path(__file__).resolve().parents[1] / "examples" / "shop"

StoreOpt = Annotated[str, typer.Option("--store", "-s", help="The store's name.")]
StoresOpt = Annotated[
    list[str] | None, typer.Option("--store", "-s", help="A store to search (repeatable).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document on stdout.")]
ModelOpt = Annotated[str | None, typer.Option("--model", "-m", help="The Ollama chat model.")]
EmbedOpt = Annotated[str | None, typer.Option("--embed-model", help="The Ollama embedding model.")]


class Context:
    settings: Settings


_ctx = Context()


def _settings(**overrides: Any) -> Settings:
    _ctx.settings = _ctx.settings.with_overrides(**overrides)
    return _ctx.settings


def _app(**overrides: Any):
    from agent.service import Archivist

    return Archivist(_settings(**overrides))


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")


def _notice(message: str) -> None:
    sys.stderr.write(message + "\n")


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and folders to ingest.")],
    store: StoreOpt,
    prune: Annotated[bool, typer.Option(help="Remove sources that no longer exist.")] = False,
    description: Annotated[
        str | None, typer.Option(help="What the store holds, told to the model.")
    ] = None,
    embed_model: EmbedOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest files and folders into a store; unchanged files are skipped."""
    archivist = _app(embed_model=embed_model)

    def progress(event: str, data: dict[str, Any]) -> None:
        if event == "stored" and not as_json:
            _notice(f"  stored {data['source']} ({data['chunks']} chunks)")

    report = archivist.ingest([str(p) for p in paths], store, prune, description, progress)
    if as_json:
        _print_json(report)
    else:
        print(
            f"{store}: {len(report['stored'])} stored, {len(report['unchanged'])} unchanged, "
            f"{len(report['failed'])} failed, {len(report['removed'])} removed; "
            f"{report['points']} chunks in the store."
        )
        for failure in report["failed"]:
            print(f"  failed: {failure['source']}: {failure['reason']}")
    if report["failed"]:
        raise typer.Exit(1)


@app.command()
def ask(
    question: Annotated[str, typer.Argument(help="The question.")],
    stores: StoresOpt = None,
    model: ModelOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Answer one question with the agent and print it."""
    from agent.chat import render_answer

    result = _app().ask(question, stores or [DEFAULT_STORE], model)
    if as_json:
        _print_json(result)
    else:
        print(render_answer(result))


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to search for.")],
    store: StoreOpt = DEFAULT_STORE,
    k: Annotated[int, typer.Option("-k", help="How many results.")] = 5,
    mode: Annotated[str, typer.Option(help="hybrid, dense or sparse.")] = "hybrid",
    as_json: JsonOpt = False,
) -> None:
    """Run the store's retrieval tool alone."""
    if mode not in ("hybrid", "dense", "sparse"):
        raise ArchivistError(f"Unknown mode '{mode}'.", "Use --mode hybrid, dense or sparse.")
    results = _app().search(query, store, k, mode)
    if as_json:
        _print_json(results)
        return
    for r in results:
        print(f"[{r['rank']}] {r['source']} (score {r['score']:.3f})\n{r['text']}\n")
    if not results:
        print("No matching passages.")


@app.command()
def chat(stores: StoresOpt = None, model: ModelOpt = None) -> None:
    """Chat with the agent in the terminal."""
    import uuid

    from langgraph.checkpoint.memory import InMemorySaver

    from agent.chat import chat_loop
    from agent.service import run_turn

    archivist = _app(chat_model=model)
    names = stores or [DEFAULT_STORE]
    sample_needed = names == [DEFAULT_STORE] and SAMPLE_KB.is_dir()
    if sample_needed and not archivist.store(DEFAULT_STORE, must_exist=False).exists():
        _notice(f"The store '{DEFAULT_STORE}' is empty: ingesting the sample knowledge base…")
        archivist.ingest(
            [str(SAMPLE_KB)], DEFAULT_STORE, description="policies of the Northwind Outfitters shop"
        )
    graph, mode = archivist.agent(names, model, checkpointer=InMemorySaver())
    if mode != "agent":
        _notice(f"{archivist.settings.chat_model} cannot call tools: using retrieve-then-answer.")
    thread = {"id": str(uuid.uuid4())}

    def answer(question: str) -> dict[str, Any]:
        from agent.models import explain

        try:
            return run_turn(
                graph, question, archivist.settings.chat_model, names, mode, thread["id"]
            )
        except Exception as exc:
            if explained := explain(exc, archivist.settings):
                raise explained from None
            raise

    def new_conversation() -> None:
        thread["id"] = str(uuid.uuid4())

    interactive = sys.stdin.isatty()
    if interactive:
        _notice(
            f"Archivist · {archivist.settings.chat_model} · stores: {', '.join(names)} · "
            "/help for commands"
        )

    def read(prompt: str) -> str:
        if interactive:
            return input(prompt)
        line = sys.stdin.readline()
        if not line:
            raise EOFError
        return line

    raise typer.Exit(chat_loop(answer, new_conversation, read, print))


@app.command()
def stores(as_json: JsonOpt = False) -> None:
    """List the stores."""
    listing = _app().stores()
    if as_json:
        _print_json(listing)
        return
    for s in listing:
        print(f"{s['store']}\t{s['chunks']} chunks\t{s['embed_model']}\t{s['description']}")
    if not listing:
        print("No stores yet. Create one with: archivist ingest PATH --store NAME")


@app.command()
def sources(store: StoreOpt, as_json: JsonOpt = False) -> None:
    """List a store's sources with their chunk counts."""
    from datetime import UTC, datetime

    listing = [
        {
            "source": info.source,
            "chunks": info.chunks,
            "complete": info.complete,
            "ingested_at": datetime.fromtimestamp(info.ingested_at, UTC).isoformat(
                timespec="seconds"
            ),
        }
        for info in _app().store(store).sources().values()
    ]
    if as_json:
        _print_json(listing)
        return
    for s in listing:
        print(f"{s['source']}\t{s['chunks']} chunks\t{s['ingested_at']}")


@app.command()
def delete(
    store: StoreOpt,
    source: Annotated[str, typer.Option(help="The source to remove, as `sources` lists it.")],
) -> None:
    """Remove one source's chunks from a store."""
    removed = _app().store(store).delete_source(source)
    if not removed:
        raise ArchivistError(
            f"Store '{store}' has no source '{source}'.",
            f"List its sources with: archivist sources --store {store}",
        )
    print(f"Removed {removed} chunks of {source} from {store}.")


@app.command()
def doctor(model: ModelOpt = None, embed_model: EmbedOpt = None) -> None:
    """Check Ollama, the two models and the stores, and say how to fix each problem."""
    from agent.doctor import run_checks

    checks = run_checks(_settings(chat_model=model, embed_model=embed_model))
    for check in checks:
        mark = "✓" if check.ok else ("!" if check.warning else "✗")
        print(f"{mark} {check.message}")
        if check.fix:
            print(f"  → {check.fix}")
    if any(not c.ok and not c.warning for c in checks):
        raise typer.Exit(1)


def main() -> None:
    """Run the CLI; expected failures print their fix and exit 1, without a traceback."""
    _ctx.settings = load_settings()
    try:
        app()
    except ArchivistError as exc:
        _notice(f"Error: {exc}")
        sys.exit(1)
    except KeyboardInterrupt:
        _notice("Interrupted.")
        sys.exit(130)
    except Exception as exc:
        from agent.models import explain

        explained = explain(exc, _ctx.settings)
        if explained is None:
            raise
        _notice(f"Error: {explained}")
        sys.exit(1)
