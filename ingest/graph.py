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
belong to the run (its `RunResources`); the state holds every document not yet stored, so a run
resumed in another process sends again whatever was in flight.
"""

import functools
import itertools
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from archivist.ingest import loading, web, worker
from archivist.ingest import roots as rooting
from archivist.ingest.discovery import escaped
from archivist.ingest.embedder import EmbedQueue, EmbedSettings, HeldVectors, embed_with_retry
from archivist.ingest.loaders import EMPTY, LoadError, NotADocument, Section, ocr, streamed
from archivist.ingest.loaders.base import reporting
from archivist.ingest.report import IngestOutcome
from archivist.ingest.request import IngestRequest
from archivist.ingest.sync import (
    Document,
    Shard,
    SourceFile,
    content_hash,
    file_document,
    iter_documents,
)
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.progress import (
    BatchStored,
    Discovered,
    Embedded,
    Failed,
    Loaded,
    ProgressFn,
    Stored,
    ignore,
)
from archivist.tools.store import SPARSE_SCHEME, Chunk, ChunkWrite, KnowledgeStore
from archivist.tools.words import count as counted

DIMENSION_PROBE = "dimension probe"
LOOKAHEAD = 2
"""Requests left queued, per request in flight, when a step returns to read more files."""
UNCHANGED_PER_LOADED = 16
COMPACT_AHEAD = 1_900
"""Chunks an ingest expects still to write when it asks the embedded store to compact what it
holds (`KnowledgeStore.compact_aside`), so that the compaction runs beside its last embedding
requests rather than after them; fewer than the store's COMPACT_POINTS, so the tail written
after it is not compacted again at close."""
RECORDS_PER_STEP = 2048
"""Documents a step takes from a record file: a 200,000-line JSONL is read in slices, so its
records are never all in memory (or in the state) at once."""


@dataclass
class PendingDoc:
    """A document loaded and split, not yet completely stored.

    A step works on its own copies of the state's pending documents (`embed_and_store`), so
    the counts it advances never change a record the state already holds."""

    source: str
    doc_hash: str
    chunks: list[Chunk]
    status: str
    """"new", or "updated" (the store holds an older version)."""
    loaded_at: float
    """When it was read: the time every chunk of this version records."""
    sent: int = 0
    """Chunks sent to the embedder so far (the first `sent`), by this run's queue."""
    stored: int = 0
    """Chunks stored so far."""
    failed: bool = False


class IngestInput(TypedDict):
    request: IngestRequest
    """The run as asked: paths, prune, description, shard, and how to read and split
    (its chunk sizes fitted to the embedding model by the plan)."""


class IngestState(IngestInput, total=False):
    run: str
    """This run's id: which requests in flight are its own."""
    files: list[SourceFile]
    """Every discovered file (paths only; contents are read one batch at a time)."""
    known: dict[str, str]
    """The store's complete source versions before this run: source → content hash."""
    cached: dict[str, str]
    """Files whose size and modification time are as when they were last read: source →
    the content hash they had then (not hashed again)."""
    not_documents: dict[str, str]
    """Files found not to be documents when last read (no text in a picture, …), unchanged
    since: source → why (not read again)."""
    roots: list[dict[str, Any]]
    """The store's roots with this run's paths resolved (`Root.to_dict()`), as recorded."""
    scopes: list[tuple[str, str]]
    """What this run covers: (root id, path inside it; '' the whole root)."""
    hashes: Annotated[list[tuple[str, str]], add]
    """(source, content hash) of the files read or found unchanged this run."""
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
    renamed: dict[str, str]


@dataclass
class RunResources:
    """What one run holds outside its state, released together when the run ends.

    None of it is in the state: a run resumed in another process starts these afresh (its
    requests in flight are sent again, its record file is opened again at its offset)."""

    held: set[str] | None = None
    """The sources the store held chunks of when the run began: only theirs can have older
    versions to remove (None, unknown, for a run resumed in another process: then any)."""
    queue: EmbedQueue | None = None
    """The embedding requests in flight."""
    reader: tuple[str, Iterator[Document]] | None = None
    """The record file being read in slices: (source, its documents not yet taken)."""
    helper: worker.WorkerRun | None = None
    """The helper process (splitting, sparse vectors)."""
    loads: loading.Loads | None = None
    """Where files are loaded: a child process within the run's time budget per file."""
    folder: tempfile.TemporaryDirectory | None = None
    """The run's own folder for the web pages it fetched, when there is no web cache."""
    read_bytes: int = 0
    """The size of the files this run has passed over so far, and the chunks they made: how
    many chunks the files left (`bytes_left`, None until its first step) will make, roughly
    (`IngestSteps._ending`)."""
    made_chunks: int = 0
    bytes_left: int | None = None
    compaction_asked: bool = False

    def scratch(self) -> Path:
        """The run's own folder, made on first use, removed when the run ends."""
        if self.folder is None:
            self.folder = tempfile.TemporaryDirectory(prefix="archivist-web-")
        return Path(self.folder.name)

    def close(self) -> None:
        """Stop the requests in flight and the helper processes; forget the rest."""
        queue, helper, loads, folder = self.queue, self.helper, self.loads, self.folder
        self.queue = self.helper = self.loads = self.reader = self.held = self.folder = None
        if queue is not None:
            queue.close()
        if helper is not None:
            helper.close()
        if loads is not None:
            loads.close()
        if folder is not None:
            folder.cleanup()


@dataclass
class IngestSteps:
    """The ingest graph's steps, and the collaborators they share; what a run asked for
    comes with its state (`IngestInput.request`)."""

    store: KnowledgeStore
    embeddings: PrefixedEmbeddings
    notify: ProgressFn = ignore
    batch_files: int = 16
    ahead: HeldVectors | None = None
    """Vectors of the first chunks, sent ahead of the graph (the embedding step takes them)."""
    """Files loaded per step (unchanged files, only hashed, do not count)."""
    runs: dict[str, RunResources] = field(default_factory=dict)
    """Each run's resources, by run id."""

    def resources(self, run: str) -> RunResources:
        """The run's resources, made on first use."""
        found = self.runs.get(run)
        if found is None:
            found = self.runs[run] = RunResources()
        return found

    def prepare(self, state: IngestState) -> dict[str, Any]:
        """Create or check the store, discover the files, and note what the store holds."""
        run = uuid.uuid4().hex
        try:
            return self._prepare(state, run)
        except BaseException:
            self.close_queue({**state, "run": run})
            raise

    def _prepare(self, state: IngestState, run: str) -> dict[str, Any]:
        request = state["request"]
        store = self.store
        created = not store.exists()
        if not created:
            dimension = store.fingerprint.get("dimension")
        else:
            # A new store: every file is loaded, so the loading process starts now, its own
            # start overlapping the store's creation and the files' discovery.
            self._loads(self.resources(run), request).start()
            probe = embed_with_retry(self.embeddings, [DIMENSION_PROBE], request.embed, self.notify)
            dimension = len(probe[0])
        store.ensure(
            {**self.embeddings.fingerprint(dimension), "splitter": request.splitter.as_dict()},
            request.description,
        )
        shard = request.shard
        before = rooting.RootSet.of(store.info())
        try:
            resolution, files, failed, skipped = rooting.prepare_roots(store, request)
        except rooting.NothingIncluded:
            if created:
                store.drop()  # no empty store left behind by a run that stores nothing
            raise
        # A run that stopped between storing a document's new version and removing its old
        # one left both: finish that now, since the file now looks unchanged.
        store.finish_replacements()
        held = store.sources()
        known = {s: info.doc_hash for s, info in held.items() if info.complete}
        removed: list[str] = []
        kept: list[str] = []
        sites = rooting.url_roots(resolution)
        if sites:
            crawled = self._crawl(request, [r.location for r in sites], held, run)
            files += rooting.page_files(sites, crawled.files)
            failed += crawled.failed
            skipped += crawled.skipped
            kept = crawled.kept
            # A page the site says is gone is removed (a file deleted is, only with --prune:
            # its absence says less than a 404 does).
            for source in crawled.gone:
                if not shard or shard.owns(source):
                    store.delete_source(source)
                    removed.append(source)
            held = {s: info for s, info in held.items() if s not in removed}
            known = {s: h for s, h in known.items() if s not in removed}
        cached = rooting.cached_hashes(resolution.roots, files, request)
        not_documents = _not_documents(resolution.roots, before, files, held)
        if shard:
            # A record file is read by every shard; each keeps the records it owns.
            files = [f for f in files if f.has_records or shard.owns(f.source)]
            skipped = [f for f in skipped if shard.owns(f.source)]
            known = {s: h for s, h in known.items() if shard.owns(s)}
        self.notify(Discovered(len(files), sum(max(f.size, 0) for f in files)))
        for failure in failed:
            self.notify(Failed(**failure.to_dict()))
        self.resources(run).held = set(held)
        return {
            "run": run,
            "files": files,
            "known": known,
            "cached": cached,
            "not_documents": not_documents,
            "roots": resolution.roots.to_list(),
            "scopes": [(sc.root, sc.sub) for sc in resolution.scopes if sc.root],
            "renamed": resolution.renamed,
            "position": 0,
            "offset": 0,
            "pending": [],
            "failed": [f.to_dict() for f in failed],
            "skipped": [f.to_dict() for f in skipped],
            "removed": removed,
            "present": kept,
        }

    def _crawl(
        self, request: IngestRequest, starts: list[str], held: dict[str, Any], run: str
    ) -> web.Crawl:
        """Crawl sites into the web cache (else a folder of the run's own)."""
        cache = None
        if request.web.cache is None:
            cache = self.resources(run).scratch()
        options = replace(request.web, prune_vanished=request.prune_blank)
        return web.crawl(starts, options, held, self.notify, cache)

    def load_batch(self, state: IngestState) -> dict[str, Any]:
        """Read the next batch of files; queue the documents that changed."""
        with reporting(self.notify):  # a long load (OCR) tells how it goes
            return self._load_batch(state)

    def _load_batch(self, state: IngestState) -> dict[str, Any]:
        start = state["position"]
        offset = state.get("offset", 0)
        # A batch is `batch_files` files to load; unchanged files, only hashed, are cheap, so
        # a step passes over up to UNCHANGED_PER_LOADED times as many.
        batch = state["files"][start : start + self.batch_files * UNCHANGED_PER_LOADED]
        known = state["known"]
        request = state["request"]
        read = _Batch()
        run = self.resources(state.get("run", ""))
        helper = self._helper(run)
        # With the helper running, files without records are loaded here and split there, all
        # of the step's in one request (`_split_loaded`, in their order among the others).
        loaded_files: list[_Loaded] | None = [] if helper.splitting else None
        loaded = 0
        for count, file in enumerate(batch, 1):
            if loaded == self.batch_files:
                batch = batch[: count - 1]
                break
            if file.has_records and loaded_files:
                self._split_loaded(loaded_files, request, helper, known, read, run)
            was_loaded, offset = self._load_file(
                file,
                request,
                known,
                read,
                run,
                offset,
                loaded_files,
                state.get("cached", {}),
                state.get("not_documents", {}),
            )
            loaded += was_loaded
            if offset:
                batch = batch[: count - 1]  # the rest of this file comes in the next step
                break
        if loaded_files:
            self._split_loaded(loaded_files, request, helper, known, read, run)
        found = [s for s in read.skipped if s["source"] not in state.get("not_documents", {})]
        if found:
            # Recorded now, not only at the end: a run stopped later (Ctrl-C in a folder of
            # 2,000 blank scans) does not read these again.
            _record_not_documents(self.store, batch, found)
        if read.pending:
            docs = [(d.source, d.doc_hash) for d in read.pending]
            texts = [[c.index_text for c in d.chunks] for d in read.pending]
            helper.add(list(zip(docs, texts, strict=True)))
        chunks = sum(len(d.chunks) for d in read.pending)
        if run.bytes_left is None:  # summed once a run, not at every step
            run.bytes_left = sum(max(f.size, 0) for f in state["files"][start:])
        passed = sum(max(f.size, 0) for f in batch)
        run.read_bytes += passed
        run.bytes_left -= passed
        run.made_chunks += chunks
        self.notify(Loaded(len(batch), len(read.unchanged), chunks, passed))
        return {
            "position": start + len(batch),
            "offset": offset,
            "pending": state.get("pending", []) + read.pending,
            "unchanged": read.unchanged,
            "failed": read.failed,
            "skipped": read.skipped,
            "removed": read.removed,
            "settled": read.settled,
            "present": read.present,
            "whole": read.whole,
            "hashes": read.hashes,
        }

    def _load_file(
        self,
        file: SourceFile,
        request: IngestRequest,
        known: dict[str, str],
        read: "_Batch",
        run: RunResources,
        offset: int = 0,
        loaded_files: "list[_Loaded] | None" = None,
        cached: dict[str, str] | None = None,
        not_documents: dict[str, str] | None = None,
    ) -> tuple[bool, int]:
        """Add one file's outcome to `read`, going on from document `offset` of a record file
        read in slices; return whether it counts as loaded (read, not only hashed) and the
        offset to go on from in the next step (0: the file is done). A file without records
        that has text is only loaded, into `loaded_files` if given, to be split with others."""
        file_options = request.loader if file.has_records else None
        file_hash = None
        not_document = (not_documents or {}).get(file.source)
        if offset == 0 and not_document and file.source not in known:
            read.skipped.append({"source": file.source, "reason": not_document})
            return False, 0
        try:
            if offset == 0 or run.reader is None:
                file_hash = (cached or {}).get(file.source) or content_hash(
                    file.path, request.splitter, file_options, file.folder
                )
        except (LoadError, OSError) as exc:
            self._failed(file, exc, read, run)
            return False, 0
        if offset == 0 and file_hash is not None:
            read.hashes.append((file.source, file_hash))
        if offset == 0 and known.get(file.source) == file_hash:
            read.unchanged.append(file.source)
            read.present.append(file.source)
            read.settled.append(file.source)
            if file.has_records:
                read.whole.append(file.source)
            return False, 0
        done = True
        try:
            _stay_inside(file)
            if file.has_records:
                documents, done = self._take(run, request, file, file_hash, offset)
            else:  # a file without records is read from its start: its hash is known
                # Loading refuses a file without text, so what is loaded has some to split.
                sections = self._loads(run, request).load(file, request.loader)
                _stay_inside(file)  # a link swapped while it was read: what was read is not kept
                if loaded_files is not None:
                    loaded_files.append(_Loaded(file, file_hash, sections))
                    return True, 0
                documents = [file_document(file, sections, request.splitter, file_hash)]
        except (LoadError, OSError) as exc:
            # A record file failing in a later slice keeps the records already taken.
            self._failed(file, exc, read, run)
            return True, 0
        self._add_documents(file, documents, done, known, request.shard, read)
        return True, 0 if done else offset + len(documents)

    def _split_loaded(
        self,
        loaded_files: "list[_Loaded]",
        request: IngestRequest,
        helper: worker.WorkerRun,
        known: dict[str, str],
        read: "_Batch",
        run: RunResources,
    ) -> None:
        """Split the loaded files' sections in the helper (here, if it fails), in one request;
        add their documents to `read`, in order."""
        texts = [section.text for item in loaded_files for section in item.sections]
        pieces = helper.split(texts, request.splitter)
        start = 0
        for item in loaded_files:
            end = start + len(item.sections)
            mine = None if pieces is None else pieces[start:end]
            start = end
            try:
                document = file_document(
                    item.file, item.sections, request.splitter, item.hash, mine
                )
            except LoadError as exc:
                self._failed(item.file, exc, read, run)
                continue
            self._add_documents(item.file, [document], True, known, request.shard, read)
        loaded_files.clear()

    def _add_documents(
        self,
        file: SourceFile,
        documents: list[Document],
        done: bool,
        known: dict[str, str],
        shard: Shard | None,
        read: "_Batch",
    ) -> None:
        """Add a file's documents to `read`: present, unchanged, or pending to be stored."""
        if done:
            read.settled.append(file.source)
        for doc in documents:
            if shard and not shard.owns(doc.source):
                continue
            read.present.append(doc.source)
            if known.get(doc.source) == doc.doc_hash:
                read.unchanged.append(doc.source)
                continue
            read.pending.append(
                PendingDoc(
                    source=doc.source,
                    doc_hash=doc.doc_hash,
                    chunks=doc.chunks,
                    status="updated" if doc.source in known else "new",
                    loaded_at=time.time(),
                )
            )

    def _loads(self, run: RunResources, request: IngestRequest) -> loading.Loads:
        if run.loads is None:
            budget = request.load_timeout
            run.loads = loading.Loads(loading.DEFAULT_SECONDS if budget is None else budget)
        return run.loads

    def _helper(self, run: RunResources) -> worker.WorkerRun:
        if run.helper is None:
            run.helper = worker.WorkerRun(
                lambda: self.store.sparse_scheme or SPARSE_SCHEME, worker.MIN_CHARS
            )
        return run.helper

    def _take(
        self,
        run: RunResources,
        request: IngestRequest,
        file: SourceFile,
        file_hash: str | None,
        offset: int,
    ) -> tuple[list[Document], bool]:
        """The next slice of a record file's documents from `offset`, and whether it is the
        last (a run resumed in another process opens the file again and skips `offset`)."""
        reader = run.reader
        if reader is None or reader[0] != file.source:
            sections = None
            if not streamed(file.path, request.loader):
                sections = self._loads(run, request).load(file, request.loader)
            documents = iter_documents(file, request.splitter, request.loader, file_hash, sections)
            for _ in itertools.islice(documents, offset):
                pass
            reader = run.reader = (file.source, documents)
        taken = list(itertools.islice(reader[1], RECORDS_PER_STEP))
        done = len(taken) < RECORDS_PER_STEP
        if done:
            run.reader = None
        return taken, done

    def _failed(self, file: SourceFile, exc: Exception, read: "_Batch", run: RunResources) -> None:
        """Record a file that could not be read: skipped if it is not a document (reported
        in the summary), failed (and reported now) otherwise."""
        run.reader = None
        reason = str(exc)
        if isinstance(exc, OSError):
            reason = exc.strerror or reason
        if isinstance(exc, NotADocument):
            read.skipped.append({"source": file.source, "reason": reason})
            if reason == EMPTY and run.held:
                self._emptied(file, read, run)
            return
        read.failed.append({"source": file.source, "reason": reason})
        self.notify(Failed(**read.failed[-1]))

    def _emptied(self, file: SourceFile, read: "_Batch", run: RunResources) -> None:
        """A file the store holds, emptied on disk: its document is now empty, so what the
        store holds of it (its records too) is removed, as a sync tool mirrors an emptied
        file. Its version stays on disk for nobody: the file is the truth."""
        mine = [name for name in run.held if name == file.source or _record_of(name, {file.source})]
        for name in mine:
            self.store.delete_source(name)
            read.removed.append(name)
        run.held.difference_update(mine)
        read.settled.append(file.source)

    def embed_and_store(self, state: IngestState) -> dict[str, Any]:
        """Send the loaded chunks to the embedder; store the answers that are back."""
        embed = state["request"].embed
        run = self.resources(state["run"])
        queue = run.queue
        if queue is None:
            # A new run, or one resumed in another process: what was in flight is sent again.
            queue = run.queue = EmbedQueue(self.embeddings, embed, self.notify, self.ahead)
            docs = [replace(d, sent=0, stored=0) for d in state["pending"]]
        else:
            docs = [replace(d) for d in state["pending"]]
        by_source = {doc.source: doc for doc in docs}
        last = state["position"] >= len(state["files"])
        for job in _pack_batches(docs, embed.batch_size, flush=last):
            queue.submit(*job)
        stored: list[dict[str, Any]] = []
        failed: list[dict[str, str]] = []
        prefetch, held = run.helper, run.held
        keep = 0 if last else LOOKAHEAD * max(1, embed.concurrency)
        for segments, result in queue.results(keep):
            if isinstance(result, BaseException):
                self._refused(queue, segments, result, by_source, failed, prefetch)
            else:
                self.store_vectors(segments, result, by_source, stored, prefetch, held)
        pending = [d for d in docs if not d.failed and d.stored < len(d.chunks)]
        if last:
            self.close_queue(state)
        elif not run.compaction_asked and self._ending(state, run, pending):
            run.compaction_asked = True
            self.store.compact_aside()
        self.notify(BatchStored(len(stored)))
        return {"pending": pending, "stored": stored, "failed": failed}

    def _ending(self, state: IngestState, run: RunResources, pending: list[PendingDoc]) -> bool:
        """Whether the run expects to write at most COMPACT_AHEAD more chunks: those of its
        documents not yet stored, and those the files left will make at the rate so far."""
        left = sum(len(d.chunks) - d.stored for d in pending)
        if state["position"] < len(state["files"]):
            if not run.read_bytes or run.bytes_left is None:
                return False
            left += run.bytes_left * run.made_chunks / run.read_bytes
        return left <= COMPACT_AHEAD

    def _refused(
        self,
        queue: EmbedQueue,
        segments: list["Segment"],
        error: BaseException,
        by_source: dict[str, PendingDoc],
        failed: list[dict[str, str]],
        prefetch: worker.WorkerRun | None = None,
    ) -> None:
        """Handle a request the embedder refused: a refused input fails only its own
        document, so a request of several documents is sent again one part at a time."""
        if len(segments) > 1:
            for source, i, j in segments:
                if source in by_source:
                    chunks = by_source[source].chunks[i:j]
                    queue.submit([(source, i, j)], [c.index_text for c in chunks])
            return
        doc = by_source.get(segments[0][0])
        if doc is not None and not doc.failed:
            doc.failed = True
            if prefetch is not None:
                prefetch.forget((doc.source, doc.doc_hash))
            failed.append({"source": doc.source, "reason": f"embedding refused: {error}"})
            self.notify(Failed(**failed[-1]))

    def store_vectors(
        self,
        segments: list["Segment"],
        vectors: list[list[float]],
        by_source: dict[str, PendingDoc],
        stored: list[dict[str, Any]],
        prefetch: worker.WorkerRun | None = None,
        held: set[str] | None = None,
    ) -> None:
        """Store a request's chunks with their vectors, in one write to the store; a document
        whose last chunk is stored is complete, and only then are its old versions removed
        (if the store held any of its chunks: `held`, None when not known)."""
        offset = 0
        parts: list[tuple[PendingDoc, list[Chunk]]] = []
        writes: list[ChunkWrite] = []
        for source, i, j in segments:
            part, offset = vectors[offset : offset + j - i], offset + j - i
            doc = by_source.get(source)
            if doc is None or doc.failed:
                continue  # a document another request failed
            piece, total = doc.chunks[i:j], len(doc.chunks)
            parts.append((doc, piece))
            ahead = prefetch.take((source, doc.doc_hash), i, j) if prefetch else None
            writes += [
                ChunkWrite(chunk, vector, doc.doc_hash, total, doc.loaded_at, sparse)
                for chunk, vector, sparse in zip(
                    piece, part, ahead or [None] * len(piece), strict=True
                )
            ]
        if writes:
            self.store.upsert(writes)
        for doc, piece in parts:
            source, total = doc.source, len(doc.chunks)
            self.notify(Embedded(source, len(piece)))
            doc.stored += len(piece)
            if doc.stored == total:
                if prefetch is not None:
                    prefetch.forget((source, doc.doc_hash))
                if held is None or source in held:
                    self.store.delete_stale(source, doc.doc_hash)
                stored.append({"source": source, "status": doc.status, "chunks": total})
                self.notify(Stored(source, total))

    def prune(self, state: IngestState) -> dict[str, Any]:
        """Remove the sources no longer among the files, within what this run covers (the
        roots, or the parts of them, its paths name; never another root's sources, nor those
        of a root whose folder is missing). A file that failed to load keeps what the store
        holds of it."""
        present = set(state.get("present", []))
        settled = set(state.get("settled", []))
        whole = set(state.get("whole", []))
        unread = [f for f in state["files"] if f.source not in settled]
        shard = state["request"].shard
        roots = rooting.RootSet(rooting.Root.from_dict(r) for r in state.get("roots", []))
        scopes = [rooting.Scope(root, sub, "", "") for root, sub in state.get("scopes", [])]
        reachable = {r.id for r in roots.roots if r.kind == "url" or _there(r)}
        whole_roots = {sc.root for sc in scopes if not sc.sub} & reachable
        blank = [] if state["request"].prune_blank else self._blank(state, roots, whole_roots)
        reachable -= {root.id for root, _ in blank}

        def in_scope(source: str) -> bool:
            found = roots.owner(source)
            if found is None:
                return False
            root, relative, _ = found
            return root.id in reachable and any(
                sc.root == root.id and sc.covers(relative) for sc in scopes
            )

        removed = [
            s
            for s in self.store.sources()
            if (shard is None or shard.owns(s))
            and s not in present
            and not _record_of(s, whole)
            and not any(f.owns(s) for f in unread)
            and in_scope(s)
        ]
        for source in removed:
            self.store.delete_source(source)
        failed = [
            {
                "source": root.location,
                "reason": f"lists no files now: its {counted(held, 'source')} "
                f"{'is' if held == 1 else 'are'} kept (an "
                "unmounted drive, a folder emptied?); sync --prune removes them",
            }
            for root, held in blank
        ]
        return {"removed": removed, "failed": failed}

    def _blank(
        self, state: IngestState, roots: "rooting.RootSet", covered: set[str]
    ) -> list[tuple["rooting.Root", int]]:
        """The folder roots among `covered` (read whole by this run) it found no file in
        (none read, failed or skipped) while the store holds sources of theirs, with how many
        it holds."""
        listed: set[str] = set()
        names = [f.source for f in state["files"]]
        names += [f["source"] for f in state.get("failed", []) + state.get("skipped", [])]
        for name in names:
            found = roots.owner(name)
            if found is not None:
                listed.add(found[0].id)
        held: dict[str, int] = {}
        for source in self.store.sources():
            found = roots.owner(source)
            if found is not None and found[0].kind == "folder":
                held[found[0].id] = held.get(found[0].id, 0) + 1
        return [
            (root, held[root.id])
            for root in roots.roots
            if root.id in covered and root.id not in listed and held.get(root.id)
        ]

    def record(self, state: IngestState) -> dict[str, Any]:
        """Record in the store what this run read of its roots: each file's size,
        modification time and hash, the files that failed and why, the sources removed; then
        release what the run still holds (its loading process, when nothing was embedded)."""
        try:
            rooting.record_run(self.store, state)
        finally:
            self.close_queue(state)
        return {}

    def after_load(self, state: IngestState) -> str:
        """Route to storing while documents wait or requests are in flight."""
        # The last store step closes the queue, so an open queue means requests in flight.
        run = self.runs.get(state.get("run", ""))
        if state["pending"] or (run is not None and run.queue is not None):
            return "embed_and_store"
        return self.after_store(state)

    def after_store(self, state: IngestState) -> str:
        """Route to the next batch, then to pruning (if asked) or the end."""
        if state["position"] < len(state["files"]):
            return "load_batch"
        return "prune" if state["request"].prune else "record"

    def close_queue(self, state: IngestState) -> None:
        """Release the run's resources: its requests in flight, its record file being read,
        its helper and loading processes and what the store held when it began."""
        run = self.runs.pop(state.get("run", ""), None)
        if run is not None:
            run.close()

    def closing_on_error(self, step: Callable[[IngestState], dict[str, Any]]):
        """Wrap a step so that its failure or interruption stops the run's requests in flight."""

        @functools.wraps(step)
        def run(state: IngestState) -> dict[str, Any]:
            try:
                return step(state)
            except BaseException:
                self.close_queue(state)
                raise

        return run


@dataclass
class _Loaded:
    """A file without records, loaded and waiting to be split."""

    file: SourceFile
    hash: str
    sections: list[Section]


@dataclass
class _Batch:
    """What one load step found, by outcome."""

    pending: list[PendingDoc] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)
    present: list[str] = field(default_factory=list)
    whole: list[str] = field(default_factory=list)
    hashes: list[tuple[str, str]] = field(default_factory=list)


def _not_documents(
    roots: "rooting.RootSet", before: "rooting.RootSet", files: list[SourceFile], held: Any
) -> dict[str, str]:
    """The pictures recorded without text when last read by OCR (the costly reading), the
    file and its root's options unchanged since: source → why (not read again)."""
    found: dict[str, str] = {}
    for file in files:
        root, was = roots.get(file.root), before.get(file.root)
        if root is None or was is None or root.options != was.options:
            continue
        entry = root.skipped.get(file.relative)
        if (
            entry
            and entry[:2] == [file.size, file.mtime_ns]
            and entry[2] in OCR_NOT_DOCUMENTS
            and file.source not in held
        ):
            found[file.source] = str(entry[2])
    return found


OCR_NOT_DOCUMENTS = frozenset(
    ("no text found in the image", "an image too small to hold text", ocr.UNREADABLE_IMAGE)
)
"""What a picture read by OCR may turn out to be, which only a change of the file changes."""


def _record_not_documents(
    store: KnowledgeStore, batch: list[SourceFile], skipped: list[dict[str, str]]
) -> None:
    """Record in the store's roots the files of a batch just found not to be documents."""
    reasons = {s["source"]: s["reason"] for s in skipped}
    info = store.info()
    roots = rooting.RootSet.of(info)
    changed = False
    for file in batch:
        root = roots.get(file.root)
        if file.source in reasons and root is not None and file.relative:
            entry = [file.size, file.mtime_ns, reasons[file.source]]
            if root.skipped.get(file.relative) != entry:
                root.skipped[file.relative] = entry
                changed = True
    if changed:
        store.annotate(**{rooting.ROOTS_KEY: roots.to_list()})


def _stay_inside(file: SourceFile) -> None:
    """Refuse a file whose path now leads out of the folder it was found in."""
    problem = escaped(file)
    if problem:
        raise LoadError(problem)


def _there(root: "rooting.Root") -> bool:
    """Whether a root is on disk as what it was: a folder still a folder, a file a file."""
    path = root.disk_path()
    return path.is_dir() if root.kind == "folder" else path.exists() and not path.is_dir()


def _record_of(source: str, files: set[str]) -> bool:
    """Whether `source` is a record `file#id` of one of `files` (a file name may hold `#`)."""
    at = source.find("#")
    while at != -1:
        if source[:at] in files:
            return True
        at = source.find("#", at + 1)
    return False


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
            doc.sent = end
        segments, texts, parts = [], [], []

    for doc in docs:
        if doc.failed:
            continue
        i, n = doc.sent, len(doc.chunks)
        while i < n:
            j = min(n, i + batch_size - len(texts))
            segments.append((doc.source, i, j))
            texts.extend(c.index_text for c in doc.chunks[i:j])
            parts.append((doc, j))
            i = j
            if len(texts) == batch_size:
                close()
    if texts and flush:
        close()
    return jobs


def store_documents(
    store: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    docs: list[PendingDoc],
    embed: EmbedSettings,
) -> list[dict[str, Any]]:
    """Embed whole documents and store them now, in requests of `embed.batch_size` chunks,
    through the graph's own storing step (`IngestSteps.store_vectors`); return the sources
    stored. For documents already split, such as a store's chunks copied under another
    embedding model."""
    steps = IngestSteps(store, embeddings)
    by_source = {doc.source: doc for doc in docs}
    stored: list[dict[str, Any]] = []
    for segments, texts in _pack_batches(docs, embed.batch_size):
        vectors = embed_with_retry(embeddings, texts, embed, steps.notify)
        steps.store_vectors(segments, vectors, by_source, stored, held=set())
    return stored


def run_ingest(graph, request: IngestRequest) -> IngestOutcome:
    """Run the ingest graph to the end and return what it did."""
    state = graph.invoke({"request": request}, {"recursion_limit": 1_000_000})
    return IngestOutcome(
        files=len(state.get("files", [])),
        stored=state.get("stored", []),
        unchanged=state.get("unchanged", []),
        failed=state.get("failed", []),
        skipped=state.get("skipped", []),
        removed=state.get("removed", []),
        renamed=state.get("renamed", {}),
    )


def build_ingest_graph(
    store: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    on_progress: ProgressFn | None = None,
    batch_files: int = 16,
    ahead: HeldVectors | None = None,
):
    """Build the graph that keeps `store` in sync with the files and folders a run's
    request names (`run_ingest`); its embedding step takes the vectors `ahead` holds."""
    steps = IngestSteps(store, embeddings, on_progress or ignore, batch_files, ahead=ahead)
    builder = StateGraph(IngestState, input_schema=IngestInput)
    builder.add_node(steps.prepare)
    builder.add_node("load_batch", steps.closing_on_error(steps.load_batch))
    builder.add_node("embed_and_store", steps.closing_on_error(steps.embed_and_store))
    builder.add_node(steps.prune)
    builder.add_node(steps.record)
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", steps.after_store, ["load_batch", "prune", "record"])
    builder.add_conditional_edges(
        "load_batch", steps.after_load, ["embed_and_store", "load_batch", "prune", "record"]
    )
    builder.add_conditional_edges(
        "embed_and_store", steps.after_store, ["load_batch", "prune", "record"]
    )
    builder.add_edge("prune", "record")
    builder.add_edge("record", END)
    return builder.compile(name="ingest")
