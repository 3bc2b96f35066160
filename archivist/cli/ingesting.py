"""`ingest` and `sync`: folders, files and sites into stores, and kept in step with them."""

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from archivist.cli.common import (
    EmbedOpt,
    JsonOpt,
    StoreOpt,
    WaitOpt,
    _app,
    _notice,
    _print_json,
    app,
)
from archivist.printable import printable, printable_name
from archivist.tools.errors import (
    ArchivistError,
)
from archivist.tools.words import count, number

if TYPE_CHECKING:
    pass


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
            metavar="GLOB",
            help="Only files matching this glob, relative to the folder ingested (gitignore "
            "syntax; repeatable).",
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
    from archivist.terminal.progress import IngestProgress

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
    prune: Annotated[
        bool,
        typer.Option(
            "--prune",
            help="Remove the sources of a root that now lists no files, or of a site whose "
            "pages all answer 404 (kept otherwise: an unmounted drive looks the same).",
        ),
    ] = False,
    wait: WaitOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Bring every root the stores record up to date with its recorded options: new and
    changed files embedded, deleted ones removed, nothing else touched."""
    from archivist.terminal.progress import IngestProgress

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
            request = archivist.sync_request(store, root, prune=prune)
            # On a terminal, the ingest's bar; elsewhere the report alone (and retry notices).
            live = sys.stderr.isatty() and not as_json
            with IngestProgress(enabled=live, live=live) as progress:
                report = archivist.ingest(request, on_progress=progress.update, release=True)
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
    # Every file is counted: a skipped one (empty, not a document) too, when there is one.
    skipped = f"{number(len(report.skipped))} skipped, " if report.skipped else ""
    print(
        f"{report.store} {printable_name(root.label)}: {count(len(report.stored), 'file')} "
        f"stored, {number(len(report.unchanged))} unchanged, {number(len(report.failed))} "
        f"failed, {skipped}{number(len(report.removed))} removed."
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
