"""`eval` and `eval generate`: models compared on a test set, and a test set written."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import typer.main

from archivist.cli.common import (
    GENERATE,
    JsonOpt,
    MaxRewritesOpt,
    RerankCandidatesOpt,
    RetrieveFirstOpt,
    StoreOpt,
    _app,
    _notice,
    _print_json,
    _rerank,
    _toolset,
    app,
)
from archivist.tools.errors import (
    ArchivistError,
)
from archivist.tools.words import count

if TYPE_CHECKING:
    pass


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
    toolsets: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            metavar="search|all",
            help="The tools each model gets (repeatable: --tools search --tools all compares "
            "them, each in its own column). Default: ARCHIVIST_TOOLS (search).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Compare chat models on the same cases: tool use, retrieval, answers, latency; and, with
    --embed-model, embedding models on retrieval. `archivist eval generate` writes the cases
    from a store."""
    from datetime import datetime

    from rich.console import Console

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
    chosen = [_toolset(t)["tools"] for t in toolsets or []] or [None]
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
    progress = counted_bar()
    with progress:
        task = progress.add_task(
            "evaluating",
            total=len(names) * len(grading) * variants * len(set(chosen)) * len(cases) * repeat
            + len(embedders),
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
            toolsets=chosen,
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

    from archivist.evaluation.generate import dropped_summary, generate_from_store, meta_path

    out = out or Path("evals") / f"{store}-generated.jsonl"
    archivist = _app()
    progress = counted_bar()
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


def counted_bar():
    """A bar on stderr counting done of total (cases run, questions written), gone when done."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console(stderr=True)
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # a log or a pipe gets no blank line left by it
    )
