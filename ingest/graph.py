"""The ingest graph: discover → load a batch → embed and store → … → prune → report.

Only one batch of files is held in the graph's state at a time, so memory stays bounded on
large corpora. A source's new chunks are stored before its old version is removed, so a
question asked during an update always finds one complete version of the document. Chunks are
stored as their embedding requests finish; a source counts as complete only once all of its
chunks are stored, so an interrupted run leaves no half-document that looks complete, and
the next run finishes it (point ids are derived from the chunks, so nothing is duplicated).

Embedding runs ahead of the graph's steps: a step sends the full requests its loaded chunks
make and stores the answers that are back, waiting only while more requests are queued than
keep the model busy; then the next files are read while Ollama works. The requests in flight
belong to the run (`EmbedQueue`); the state holds every document not yet stored, so a run
resumed in another process sends again whatever was in flight.
"""

import functools
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from archivist.ingest.embedder import EmbedQueue, EmbedSettings, embed_with_retry
from archivist.ingest.loaders import LoaderOptions, LoadError, NotADocument
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import (
    Document,
    FolderRules,
    Shard,
    SourceFile,
    content_hash,
    discover,
    iter_documents,
    make_documents,
)
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.store import Chunk, KnowledgeStore

ProgressFn = Callable[[str, dict[str, Any]], None]
DIMENSION_PROBE = "dimension probe"
LOOKAHEAD = 2
"""Requests left queued, per request in flight, when a step returns to read more files."""
UNCHANGED_PER_LOADED = 16
RECORDS_PER_STEP = 2048
"""Documents a step takes from a record file: a 200,000-line JSONL is read in slices, so its
records are never all in memory (or in the state) at once."""


class PendingDoc(TypedDict):
    source: str
    doc_hash: str
    chunks: list[Chunk]
    status: str
    sent: int
    """Chunks sent to the embedder so far (the first `sent`), by this run's queue."""
    stored: int
    """Chunks stored so far."""
    failed: bool
    loaded_at: float
    """When it was read: the time every chunk of this version records."""


class IngestInput(TypedDict, total=False):
    paths: list[str]
    """Files and folders to ingest."""
    prune: bool
    """Remove sources that are no longer among the discovered files."""
    description: str | None
    """What the store holds, in words; shown to the model in the tool's description."""
    shard: str | None
    """Only this part of the sources, `i/N` (see `Shard`): N runs of parts 1…N, on one
    machine or several, together do what one run without a shard does."""


class IngestState(IngestInput, total=False):
    run: str
    """This run's id: which requests in flight are its own."""
    files: list[SourceFile]
    """Every discovered file (paths only; contents are read one batch at a time)."""
    known: dict[str, str]
    """The store's complete source versions before this run: source → content hash."""
    position: int
    """How many of `files` have been loaded so far."""
    offset: int
    """Documents already taken from the record file at `position` (read in slices)."""
    pending: list[PendingDoc]
    """Documents loaded and split, not yet completely stored."""
    settled: Annotated[list[str], add]
    """Files read this run (loaded, or unchanged): their sources are exactly `present`."""
    present: Annotated[list[str], add]
    """Sources found in the files this run, stored or unchanged."""
    whole: Annotated[list[str], add]
    """Record files found unchanged as a whole: every `file#id` source of theirs is present."""
    stored: Annotated[list[dict[str, Any]], add]
    unchanged: Annotated[list[str], add]
    failed: Annotated[list[dict[str, str]], add]
    skipped: Annotated[list[dict[str, str]], add]
    removed: Annotated[list[str], add]


def build_ingest_graph(
    store: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    splitter: SplitterSettings | None = None,
    batch_files: int = 16,
    embed: EmbedSettings | None = None,
    loader_options: LoaderOptions | None = None,
    on_progress: ProgressFn | None = None,
    folder_rules: FolderRules | None = None,
):
    """Build the graph that keeps `store` in sync with a set of files and folders."""
    splitter = splitter or SplitterSettings()
    embed = embed or EmbedSettings()
    options = loader_options or LoaderOptions()
    notify = on_progress or (lambda event, data: None)

    def on_retry(error: BaseException, attempt: int, wait_s: float) -> None:
        notify("retry", {"error": str(error), "attempt": attempt, "wait": wait_s})

    def prepare(state: IngestState) -> dict[str, Any]:
        if store.exists():
            dimension = store.fingerprint.get("dimension")
        else:
            probe = embed_with_retry(embeddings, [DIMENSION_PROBE], embed, on_retry)
            dimension = len(probe[0])
        store.ensure(
            {**embeddings.fingerprint(dimension), "splitter": splitter.as_dict()},
            state.get("description"),
        )
        shard = _shard(state)
        files, failed, skipped = discover([Path(p) for p in state["paths"]], options, folder_rules)
        known = {s: info.doc_hash for s, info in store.sources().items() if info.complete}
        if shard:
            # A record file is read by every shard; each keeps the records it owns.
            files = [f for f in files if f.has_records or shard.owns(f.source)]
            skipped = [f for f in skipped if shard.owns(f.source)]
            known = {s: h for s, h in known.items() if shard.owns(s)}
        notify("discovered", {"files": len(files)})
        for failure in failed:
            notify("failed", failure.to_dict())
        return {
            "run": uuid.uuid4().hex,
            "files": files,
            "known": known,
            "position": 0,
            "offset": 0,
            "pending": [],
            "failed": [f.to_dict() for f in failed],
            "skipped": [f.to_dict() for f in skipped],
        }

    readers: dict[str, tuple[str, Iterator[Document]]] = {}  # each run's record file, open

    def take(run: str, file: SourceFile, file_hash: str | None, offset: int):
        """The next slice of a record file's documents from `offset`, and whether it is the
        last (a run resumed in another process opens the file again and skips `offset`)."""
        reader = readers.get(run)
        if reader is None or reader[0] != file.source:
            documents = iter_documents(file, splitter, options, file_hash)
            for _ in itertools.islice(documents, offset):
                pass
            reader = readers[run] = (file.source, documents)
        taken = list(itertools.islice(reader[1], RECORDS_PER_STEP))
        done = len(taken) < RECORDS_PER_STEP
        if done:
            readers.pop(run, None)
        return taken, done

    def load_batch(state: IngestState) -> dict[str, Any]:
        start = state["position"]
        offset = state.get("offset", 0)
        run = state["run"]
        # A batch is `batch_files` files to load; unchanged files, only hashed, are cheap, so
        # a step passes over up to UNCHANGED_PER_LOADED times as many.
        batch = state["files"][start : start + batch_files * UNCHANGED_PER_LOADED]
        known = state["known"]
        shard = _shard(state)
        pending, unchanged, failed, skipped, settled, present, whole = [], [], [], [], [], [], []
        loaded = 0
        for count, file in enumerate(batch, 1):
            if loaded == batch_files:
                batch = batch[: count - 1]
                break
            file_options = options if file.has_records else None
            file_hash, done = None, True
            try:
                if offset == 0 or run not in readers:
                    file_hash = content_hash(file.path, splitter, file_options)
                if offset == 0 and known.get(file.source) == file_hash:
                    unchanged.append(file.source)
                    present.append(file.source)
                    settled.append(file.source)
                    if file.has_records:
                        whole.append(file.source)
                    continue
                loaded += 1
                if file.has_records:
                    documents, done = take(run, file, file_hash, offset)
                else:
                    documents = make_documents(file, splitter, options, file_hash)
            except (LoadError, OSError) as exc:
                # A record file failing in a later slice keeps the records already taken.
                readers.pop(run, None)
                offset = 0
                reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
                if isinstance(exc, NotADocument):
                    skipped.append({"source": file.source, "reason": reason})
                else:
                    failed.append({"source": file.source, "reason": reason})
                    notify("failed", failed[-1])
                continue
            offset = 0 if done else offset + len(documents)
            if done:
                settled.append(file.source)
            for doc in documents:
                if shard and not shard.owns(doc.source):
                    continue
                present.append(doc.source)
                if known.get(doc.source) == doc.doc_hash:
                    unchanged.append(doc.source)
                    continue
                status = "updated" if doc.source in known else "new"
                pending.append(
                    PendingDoc(
                        source=doc.source,
                        doc_hash=doc.doc_hash,
                        chunks=doc.chunks,
                        status=status,
                        sent=0,
                        stored=0,
                        failed=False,
                        loaded_at=time.time(),
                    )
                )
            if not done:
                batch = batch[: count - 1]  # the rest of this file comes in the next step
                break
        notify(
            "loaded",
            {
                "files": len(batch),
                "unchanged": len(unchanged),
                "chunks": sum(len(d["chunks"]) for d in pending),
            },
        )
        return {
            "position": start + len(batch),
            "offset": offset,
            "pending": state.get("pending", []) + pending,
            "unchanged": unchanged,
            "failed": failed,
            "skipped": skipped,
            "settled": settled,
            "present": present,
            "whole": whole,
        }

    queues: dict[str, EmbedQueue] = {}  # each run's requests in flight

    def close_queue(state: IngestState) -> None:
        readers.pop(state.get("run", ""), None)
        queue = queues.pop(state.get("run", ""), None)
        if queue is not None:
            queue.close()

    def embed_and_store(state: IngestState) -> dict[str, Any]:
        docs = [PendingDoc(**d) for d in state["pending"]]
        queue = queues.get(state["run"])
        if queue is None:
            # A new run, or one resumed in another process: what was in flight is sent again.
            queue = queues[state["run"]] = EmbedQueue(embeddings, embed, on_retry)
            for doc in docs:
                doc["sent"] = doc["stored"] = 0
        by_source = {doc["source"]: doc for doc in docs}
        last = state["position"] >= len(state["files"])
        for job in _pack_batches(docs, embed.batch_size, flush=last):
            queue.submit(*job)
        stored, failed = [], []
        keep = 0 if last else LOOKAHEAD * max(1, embed.concurrency)
        for segments, result in queue.results(keep):
            if isinstance(result, BaseException):
                if len(segments) > 1:
                    # Refused input fails only its own document: send each part alone.
                    for source, i, j in segments:
                        if source in by_source:
                            chunks = by_source[source]["chunks"][i:j]
                            queue.submit([(source, i, j)], [c.text for c in chunks])
                    continue
                doc = by_source.get(segments[0][0])
                if doc is not None and not doc["failed"]:
                    doc["failed"] = True
                    failed.append(
                        {"source": doc["source"], "reason": f"embedding refused: {result}"}
                    )
                    notify("failed", failed[-1])
                continue
            offset = 0
            for source, i, j in segments:
                vectors, offset = result[offset : offset + j - i], offset + j - i
                doc = by_source.get(source)
                if doc is None or doc["failed"]:
                    continue  # a document another request failed
                chunks, total = doc["chunks"][i:j], len(doc["chunks"])
                store.upsert(
                    chunks,
                    vectors,
                    [doc["doc_hash"]] * len(chunks),
                    [total] * len(chunks),
                    doc["loaded_at"],
                )
                notify("embedded", {"source": source, "chunks": len(chunks)})
                doc["stored"] += len(chunks)
                if doc["stored"] == total:
                    store.delete_stale(source, doc["doc_hash"])
                    stored.append({"source": source, "status": doc["status"], "chunks": total})
                    notify("stored", {"source": source, "chunks": total})
        if last:
            close_queue(state)
        notify("batch_stored", {"documents": len(stored)})
        pending = [d for d in docs if not d["failed"] and d["stored"] < len(d["chunks"])]
        return {"pending": pending, "stored": stored, "failed": failed}

    def prune(state: IngestState) -> dict[str, Any]:
        present = set(state.get("present", []))
        settled = set(state.get("settled", []))
        whole = set(state.get("whole", []))
        # A file that failed to load keeps what the store holds of it.
        unread = [f for f in state["files"] if f.source not in settled]
        shard = _shard(state)
        removed = [
            s
            for s in store.sources()
            if (shard is None or shard.owns(s))
            and s not in present
            and not _record_of(s, whole)
            and not any(f.owns(s) for f in unread)
        ]
        for source in removed:
            store.delete_source(source)
        return {"removed": removed}

    def after_load(state: IngestState) -> str:
        # Documents to store, or requests still in flight (the last step closes the queue).
        if state["pending"] or state.get("run") in queues:
            return "embed_and_store"
        return after_store(state)

    def after_store(state: IngestState) -> str:
        if state["position"] < len(state["files"]):
            return "load_batch"
        return "prune" if state.get("prune") else END

    def closing_on_error(node: Callable[[IngestState], dict[str, Any]]):
        """Stop the run's requests in flight when a step fails or is interrupted."""

        @functools.wraps(node)
        def run(state: IngestState) -> dict[str, Any]:
            try:
                return node(state)
            except BaseException:
                close_queue(state)
                raise

        return run

    builder = StateGraph(IngestState, input_schema=IngestInput)
    builder.add_node(prepare)
    builder.add_node("load_batch", closing_on_error(load_batch))
    builder.add_node("embed_and_store", closing_on_error(embed_and_store))
    builder.add_node(prune)
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", after_store, ["load_batch", "prune", END])
    builder.add_conditional_edges(
        "load_batch", after_load, ["embed_and_store", "load_batch", "prune", END]
    )
    builder.add_conditional_edges("embed_and_store", after_store, ["load_batch", "prune", END])
    builder.add_edge("prune", END)
    return builder.compile(name="ingest")


def _record_of(source: str, files: set[str]) -> bool:
    """Whether `source` is a record `file#id` of one of `files` (a file name may hold `#`)."""
    at = source.find("#")
    while at != -1:
        if source[:at] in files:
            return True
        at = source.find("#", at + 1)
    return False


def _shard(state: IngestState) -> Shard | None:
    return Shard.parse(state["shard"]) if state.get("shard") else None


Segment = tuple[str, int, int]


def _pack_batches(
    docs: list[PendingDoc], batch_size: int, flush: bool = True
) -> list[tuple[list[Segment], list[str]]]:
    """Pack the chunks not yet sent into requests of `batch_size` texts, across documents, so
    many small documents (records, short pages) still make full requests. Each request lists
    its segments: (source, first chunk, end chunk). A last, partial request is made only with
    `flush`; otherwise its chunks wait for the next documents. Packed chunks count as sent."""
    jobs: list[tuple[list[Segment], list[str]]] = []
    segments: list[Segment] = []
    texts: list[str] = []
    parts: list[tuple[PendingDoc, int]] = []

    def close() -> None:
        nonlocal segments, texts, parts
        jobs.append((segments, texts))
        for doc, end in parts:
            doc["sent"] = end
        segments, texts, parts = [], [], []

    for doc in docs:
        if doc["failed"]:
            continue
        i, n = doc["sent"], len(doc["chunks"])
        while i < n:
            j = min(n, i + batch_size - len(texts))
            segments.append((doc["source"], i, j))
            texts.extend(c.text for c in doc["chunks"][i:j])
            parts.append((doc, j))
            i = j
            if len(texts) == batch_size:
                close()
    if texts and flush:
        close()
    return jobs


def run_ingest(
    graph,
    paths: list[str],
    prune: bool = False,
    description: str | None = None,
    shard: str | None = None,
) -> dict[str, Any]:
    """Run the ingest graph to the end and return its report."""
    state = graph.invoke(
        {"paths": paths, "prune": prune, "description": description, "shard": shard},
        {"recursion_limit": 1_000_000},
    )
    return {
        "files": len(state.get("files", [])),
        "stored": state.get("stored", []),
        "unchanged": state.get("unchanged", []),
        "failed": state.get("failed", []),
        "skipped": state.get("skipped", []),
        "removed": state.get("removed", []),
        "chunks_embedded": sum(s["chunks"] for s in state.get("stored", [])),
    }
