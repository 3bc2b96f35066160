"""An ingest with nothing to do, told before the ingest graph is built.

Re-running an ingest, or a `sync`, over files that have not moved is the commonest run of all
(a script, a watch catching up, a habit), and the graph has nothing to do in it: every file's
size and modification time are those the store recorded when it last read the file with the
same settings, and the store holds that file's version whole. This check answers such a run
from what the store recorded (its roots, each file's size, time and hash, and its sources'
versions, which the embedded store keeps with its seal), stat-ing the files and reading none;
the command then needs neither LangGraph nor LangChain nor qdrant-client.

Anything else — a new, moved, deleted (with prune) or failed file, a root or options not
recorded, a rename, a rebuild, a shard, a site, a description or embedding model that changes,
a version left half-replaced — returns None, and the graph runs as always: it alone writes.
"""

from typing import Any

from archivist.ingest import roots as rooting
from archivist.ingest.report import IngestReport
from archivist.ingest.request import IngestRequest
from archivist.tools.collector import collector_paused
from archivist.tools.progress import Discovered, Loaded, ProgressFn, ignore
from archivist.tools.store import SPARSE_SCHEME, KnowledgeStore


def unchanged_report(
    request: IngestRequest,
    store: KnowledgeStore,
    context: int,
    fingerprint: dict[str, Any],
    on_progress: ProgressFn | None = None,
) -> IngestReport | None:
    """The report of `request` if running it would change nothing in `store`, else None.

    `context` is the embedding model's context (tokens), which fits the request's chunk sizes
    as the graph's run would; `fingerprint` the embedding model's keys the store must have
    been built with (`embed_model`, `document_prefix`, `query_prefix`)."""
    with collector_paused():
        return _report(request, store, context, fingerprint, on_progress)


def _report(
    request: IngestRequest,
    store: KnowledgeStore,
    context: int,
    fingerprint: dict[str, Any],
    on_progress: ProgressFn | None,
) -> IngestReport | None:
    if request.urls or request.reindex or request.shard or not store.exists():
        return None
    info = store.info()
    built = info.get("fingerprint", {})
    if any(built.get(key) != value for key, value in fingerprint.items()):
        return None
    if built.get("sparse") != SPARSE_SCHEME or info.get(rooting.RENAMING_KEY):
        return None
    if request.description is not None and request.description != info.get("description", ""):
        return None
    try:
        request = request.fitted(context, fingerprint.get("embed_model", ""))
    except ValueError:
        return None
    before = rooting.RootSet.of(info)
    resolution = rooting.resolve(request.paths, before, request.recorded_options())
    if resolution.roots.roots != before.roots:
        return None  # a root or its options to record
    files, failed, skipped = rooting.scan_scopes(resolution, request)
    if failed or any(file.has_records for file in files):
        return None
    held, superseded = store.source_versions()
    if superseded:
        return None  # a version left half-replaced, finished by the graph's run
    # The roots are those recorded, so every source a root names keeps its name: only a
    # source no root records may be renamed (`renames_for` finds none to rename here).
    if rooting.unowned_renames(held, before, {}, files):
        return None
    cached = rooting.cached_hashes(resolution.roots, files, request)
    not_documents = []
    for file in files:
        version = held.get(file.source)
        if version is None:
            root = resolution.roots.get(file.root)
            entry = root.skipped.get(file.relative) if root is not None else None
            if entry and entry[:2] == [file.size, file.mtime_ns]:
                not_documents.append({"source": file.source, "reason": entry[2]})
                continue
            return None
        if not version.complete or cached.get(file.source) != version.doc_hash:
            return None
    if _failures_to_forget(resolution) or (request.prune and _gone(resolution, held, files)):
        return None
    notify = on_progress or ignore
    size = sum(max(file.size, 0) for file in files)
    notify(Discovered(len(files), size))
    skipped_now = {f["source"] for f in not_documents}
    unchanged = [file.source for file in files if file.source not in skipped_now]
    notify(Loaded(len(files), len(unchanged), 0, size))
    return IngestReport(
        files=len(files),
        stored=[],
        unchanged=unchanged,
        failed=[],
        # As the graph lists them: those found by their names, then those read.
        skipped=[f.to_dict() for f in skipped] + not_documents,
        removed=[],
        renamed={},
        store=store.name,
        shard=None,
        reindexed=False,
        points=store.count(),
        splitter=request.splitter,
        seconds=0.0,
    )


def _failures_to_forget(resolution: rooting.Resolution) -> bool:
    """Whether a root records failed files inside the run's scopes (a run forgets those no
    longer there, and tries the others again)."""
    for scope in resolution.scopes:
        root = resolution.roots.get(scope.root)
        if root is not None and any(scope.covers(relative) for relative in root.failed):
            return True
    return False


def _gone(resolution: rooting.Resolution, held: dict[str, Any], files: list[Any]) -> bool:
    """Whether a stored source of the run's scopes is no longer on disk (pruned by the run,
    as the graph's `prune` step decides)."""
    present = {file.source for file in files}
    for name in held:
        if name in present or (found := resolution.roots.owner(name)) is None:
            continue
        root, relative, _ = found
        if root.disk_path().exists() and any(
            scope.root == root.id and scope.covers(relative) for scope in resolution.scopes
        ):
            return True
    return False
