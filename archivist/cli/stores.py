"""`stores`, `sources`, `read`, `delete` and `migrate`: what the stores hold, and their upkeep."""

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
import typer.main

from archivist.cli.common import (
    JsonOpt,
    StoreOpt,
    WaitOpt,
    _app,
    _interactive,
    _notice,
    _print_json,
    app,
)
from archivist.printable import printable, printable_name
from archivist.settings import DEFAULT_STORE
from archivist.tools.errors import (
    ArchivistError,
)
from archivist.tools.words import count, number

if TYPE_CHECKING:
    pass


@app.command()
def stores(as_json: JsonOpt = False) -> None:
    """List the stores."""
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
        if s.get("sparse_notice"):
            _notice(s["sparse_notice"])
        if s.get("embedding_notice"):
            _notice(s["embedding_notice"])


@app.command()
def sources(
    store: StoreOpt,
    contains: Annotated[
        str | None,
        typer.Option(
            metavar="TEXT",
            help="Only sources whose stored text holds this text (case ignored): every one, "
            "with the exact count and the first places.",
        ),
    ] = None,
    path: Annotated[
        str | None,
        typer.Option(
            metavar="PATTERN",
            help="Only sources whose name fits: a name, a folder, a prefix or a pattern (*.pdf).",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """List a store's sources by root, each with its chunks and its status against the disk:
    ok, changed, deleted, new (not yet stored), incomplete (an ingest stopped while storing
    it), failed (with why), or unknown (no root). With --contains or --path: the sources that
    match, with their title, kind and size."""
    if contains is not None or path is not None:
        _matching_sources(store, contains, path, as_json)
        return
    from archivist.ingest.status import STATUSES

    listing = _app().source_status(store)
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
    then = ""
    if totals["incomplete"]:
        then = f". Finish the stopped ingest with: archivist sync --store {store}"
    elif any(totals[k] for k in ("changed", "deleted", "new")):
        then = f". Bring it up to date with: archivist sync --store {store}"
    counted = f"{count(len(rows), 'source')} in {count(roots, 'root')}"
    print(f"{store}: {counted}: {_status_counts(totals)}{then}")


def _matching_sources(store: str, contains: str | None, path: str | None, as_json: bool) -> None:
    if contains is not None and not contains.strip():
        raise ArchivistError("--contains is empty.", "Give the text to look for.")
    found = _app().list_documents(store, contains, path)
    if as_json:
        _print_json(found)
        return
    lines = []
    for entry in found:
        line = f"{printable_name(entry['source'])}\t{entry['kind'] or '-'}\t"
        line += f"{count(entry['chunks'], 'chunk')}"
        if "count" in entry:
            places = ", ".join(_place_text(p) for p in entry["places"])
            line += f"\t{count(entry['count'], 'time')}\t{places}"
        if entry.get("title"):
            line += f"\t{printable(entry['title'])}"
        lines.append(line)
    if lines:
        print("\n".join(lines))
    what = f" containing '{contains}'" if contains else ""
    total = sum(e.get("count", 0) for e in found)
    tail = f", {count(total, 'occurrence')} in all" if contains else ""
    print(f"{store}: {count(len(found), 'source')}{what}{tail}.")


def _place_text(place: dict[str, Any]) -> str:
    where = f"line {place['line']}"
    if "page" in place:
        return f"page {place['page']} {where}"
    if "sheet" in place:
        return f"sheet {place['sheet']} {where}"
    return where


@app.command()
def read(
    source: Annotated[
        str, typer.Argument(help="The source, as `sources` lists it (or its title).")
    ],
    store: StoreOpt = DEFAULT_STORE,
    lines: Annotated[
        str | None, typer.Option(help="Only these lines, A-B (A- to the end).")
    ] = None,
    page: Annotated[
        str | None,
        typer.Option(help="Only this PDF page or slide, or this sheet (its name or number)."),
    ] = None,
    heading: Annotated[str | None, typer.Option(help="Only this heading's section.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Print one source as stored, in order, with its line numbers (the file's own for text
    and Markdown) and pages; or the part of it given by --lines, --page or --heading."""
    chosen = (("--lines", lines), ("--page", page), ("--heading", heading))
    given = [flag for flag, value in chosen if value]
    if len(given) > 1:
        raise ArchivistError(f"{' and '.join(given)} both choose a part.", "Give one of them.")
    found = _app().read_document(store, source, lines, page, heading)
    if as_json:
        _print_json(found)
        return
    for note in found["notes"]:
        _notice(f"Note: {note}")
    out, page_now = [], None
    width = len(str(found["lines"][-1]["n"])) if found["lines"] else 1
    for line in found["lines"]:
        marker = line.get("page", line.get("sheet"))
        if marker is not None and marker != page_now:
            out.append(f"--- {'page' if 'page' in line else 'sheet'} {marker} ---")
            page_now = marker
        out.append(f"{line['n']:>{width}}  {printable(line['text'])}")
    print("\n".join(out))
    first, last = found["total_lines"] or [0, 0]
    _notice(f"{found['source']}: {found['part']}, of lines {first}-{last}.")


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
        found = archivist.find_root(store, root)
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
        deleted = archivist.delete_source(store, source)
        removed = deleted["chunks"]
        done = (
            f"Removed {count(removed, 'chunk')} of {printable_name(deleted['source'])} "
            f"from {store}."
        )
    else:
        removed = archivist.store_size(store)
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
        removed = archivist.delete_store(store)
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
    if api_key or from_api_key:
        _notice(
            "Note: an API key given on the command line is visible to every user of this "
            "machine in the process list; set QDRANT_API_KEY in the environment instead."
        )
    from archivist.tools.progress import Copied, Event

    def progress(event: Event) -> None:
        if isinstance(event, Copied) and event.chunks == event.total:
            _notice(f"{event.store}: {count(event.chunks, 'chunk')} copied.")

    done = _app(store_wait=wait).copy_stores(
        to_url=to_url,
        to_home=to_home,
        from_url=from_url,
        from_home=from_home,
        api_key=api_key,
        from_api_key=from_api_key,
        stores=stores or [],
        force=force,
        batch=batch,
        grpc=grpc,
        on_progress=None if as_json else progress,
    )
    if as_json:
        _print_json(done)
        return
    origin, destination, copied = done["from"], done["to"], done["stores"]
    for entry in copied:
        copied = count(entry["chunks"], "chunk")
        print(f"{entry['store']}: {copied} copied in {entry['seconds']:g} s.")
    if not copied:
        print(f"No stores in {origin}.")
    else:
        print(f"Copied to {destination}; nothing was embedded again.")
