"""A helper process that splits loaded files and makes chunks' sparse vectors while the
ingest process feeds the embedder and writes the store.

On a large ingest, splitting and the BM25 document vectors are the biggest shares of our own
CPU per chunk that are not the store's. Both are pure functions of the text, so a second
process does them: a loaded batch's texts are split there (the ingest process waits for the
pieces, its threads talking to Ollama go on), and its chunks' vectors are made there while the
batch is embedded, ready when its embeddings come back to be stored.

The helper is a plain `python -m archivist.ingest.worker` child speaking pickles over its
stdin and stdout: it imports the splitter and the sparse module and nothing else of ours (no
LangChain, no Qdrant), it runs in its own session so the terminal's Ctrl-C reaches only the
ingest process, and it ends when its stdin closes, which happens whenever the ingest process
ends, however it ends. Anything going wrong with it (it cannot start, it dies, it fails a
request) turns into `None` for the requests concerned, and the caller does that work in its
own process: the same chunks and vectors, only slower.

Started with `--loads`, the same program loads files for the ingest's time budget per file
(`archivist.ingest.loading`): it imports the loaders first, says it is ready, and sends each
load's progress events ahead of its answer.
"""

import atexit
import contextlib
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Imported where they are used: the program started with `--loads` needs neither.
    from archivist.ingest.splitter import SplitterSettings, TextChunk

SparseVector = tuple[list[int], list[float]]
DocKey = tuple[str, str]
"""A loaded document: (source, content hash), which decide its chunks and so its vectors."""

MIN_CHARS = 300_000
"""Characters an ingest loads before it starts the helper. Starting one costs ~0.12 s of CPU
(Python, its imports, the BM25 model), what the vectors of ~300,000 characters of mixed
English/Chinese text cost in-process (0.42 µs a character with qdrant-edge's encoder, new
stores' scheme; 0.31 with our own tokenizer): small ingests (tests, notebooks, a few files)
never pay for it, and a large one gets back the start in its first batches."""

WAIT_S = 60.0
"""How long the helper may go without answering any request while the ingest waits for one:
then it is taken as stuck, stopped, and the ingest does the work itself."""

_STOP = object()


@contextlib.contextmanager
def interrupts_held():
    """Hold Ctrl-C through the block, then raise it: a child process started in the block is
    registered to be waited for before the KeyboardInterrupt comes, never left running
    unknown (one raised inside `Popen`, after the fork, loses the process). In the main
    thread with Python's own Ctrl-C handling; elsewhere the block runs as it is."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    pressed: list[int] = []
    signal.signal(signal.SIGINT, lambda number, frame: pressed.append(number))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if pressed:
        raise KeyboardInterrupt


class Worker:
    """The ingest's helper process, started on first use; it answers requests in order."""

    command: Sequence[str] = (sys.executable, "-m", "archivist.ingest.worker")

    def __init__(self, scheme: str) -> None:
        self.scheme = scheme
        self._process: subprocess.Popen | None = None
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._waiting: deque[Future] = deque()
        self._lock = threading.Lock()
        self._broken = False
        self._answered = time.monotonic()

    @property
    def broken(self) -> bool:
        """Whether the helper could not start or has stopped working."""
        return self._broken

    def silent_s(self) -> float:
        """Seconds since the helper started or last answered."""
        return time.monotonic() - self._answered

    def vectors(self, texts: list[str]) -> "Future[list[SparseVector] | None]":
        """Ask for the document vectors of `texts`; the future gives None if the helper fails."""
        return self._submit("vectors", texts, self.scheme)

    def split(
        self, texts: list[str], settings: "SplitterSettings"
    ) -> "Future[list[list[TextChunk]] | None]":
        """Ask for `split_text` of each of `texts`; the future gives None if the helper fails."""
        return self._submit("split", texts, settings)

    def _submit(self, task: str, *args: object) -> Future:
        future: Future = Future()
        with self._lock:
            if self._broken or not self._started():
                future.set_result(None)
                return future
            self._waiting.append(future)
        self._requests.put((task, args))
        return future

    def close(self) -> None:
        """Stop the helper: it finishes its request in hand and exits."""
        with self._lock:
            process, self._process = self._process, None
            self._fail()
        if process is None:
            return
        atexit.unregister(self.close)
        self._requests.put(_STOP)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _started(self) -> bool:
        if self._process is not None:
            return True
        # However the ingest ends (even interrupted between two of its steps, or while the
        # helper starts), the helper is waited for before this process exits.
        with interrupts_held():
            try:
                self._answered = time.monotonic()
                self._process = subprocess.Popen(
                    self.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C stops the ingest, which then closes this
                )
            except OSError:
                self._broken = True
                return False
            atexit.register(self.close)
        # Writing on a thread of its own: a request larger than the pipe holds never makes
        # the ingest wait for the helper to finish the one before.
        threading.Thread(target=self._write, args=(self._process,), daemon=True).start()
        threading.Thread(target=self._read, args=(self._process,), daemon=True).start()
        return True

    def _write(self, process: subprocess.Popen) -> None:
        stream = process.stdin
        try:
            while (request := self._requests.get()) is not _STOP:
                pickle.dump(request, stream, protocol=pickle.HIGHEST_PROTOCOL)
                stream.flush()
        except (OSError, ValueError):
            with self._lock:
                self._fail()
        finally:
            with contextlib.suppress(OSError):
                stream.close()

    def _read(self, process: subprocess.Popen) -> None:
        stream = process.stdout
        try:
            while True:
                ok, answer = pickle.load(stream)
                with self._lock:
                    if not self._waiting:
                        return
                    future = self._waiting.popleft()
                    self._answered = time.monotonic()
                future.set_result(answer if ok else None)
        except Exception:  # EOF, a broken pipe, or anything but our answers: do without it
            pass
        finally:
            with self._lock:
                self._fail()
            stream.close()

    def _fail(self) -> None:
        """Mark the helper broken and answer None to every request still waiting (with the
        lock held)."""
        self._broken = True
        while self._waiting:
            self._waiting.popleft().set_result(None)


class WorkerRun:
    """One run's use of the helper, once the run has loaded MIN_CHARS characters: splitting
    loaded texts, and sparse vectors made ahead by document (before that, and whenever the
    helper fails, `split` and `take` give None and the caller does the work itself)."""

    def __init__(self, scheme: Callable[[], str], min_chars: int = MIN_CHARS) -> None:
        self.scheme = scheme
        """The store's sparse scheme, asked for when the helper starts."""
        self.min_chars = min_chars
        self.worker: Worker | None = None
        self._chars = 0
        self._docs: dict[DocKey, tuple[Future, int]] = {}

    def add(self, docs: Sequence[tuple[DocKey, list[str]]]) -> None:
        """Hand over the chunk texts of newly loaded documents, each named by its key."""
        if self.worker is None:
            self._chars += sum(len(t) for _, texts in docs for t in texts)
            if self._chars < self.min_chars:
                return
            self.worker = Worker(self.scheme())
        if self.worker.broken:
            return
        future = self.worker.vectors([t for _, texts in docs for t in texts])
        offset = 0
        for key, texts in docs:
            self._docs[key] = (future, offset)
            offset += len(texts)

    @property
    def splitting(self) -> bool:
        """Whether the helper is running, so loaded texts are worth sending to it to split."""
        return self.worker is not None and not self.worker.broken

    def split(
        self, texts: list[str], settings: "SplitterSettings"
    ) -> "list[list[TextChunk]] | None":
        """`split_text` of each of `texts`, made by the helper (None: make them here)."""
        if self.worker is None:
            return None
        return self._result(self.worker.split(texts, settings))

    def take(self, key: DocKey, start: int, end: int) -> list[SparseVector] | None:
        """The vectors of chunks `start:end` of a document, or None if the helper has none."""
        found = self._docs.get(key)
        if found is None:
            return None
        future, offset = found
        vectors = self._result(future)
        return None if vectors is None else vectors[offset + start : offset + end]

    def _result(self, future: Future) -> Any:
        while True:
            try:
                return future.result(timeout=WAIT_S)
            except TimeoutError:
                if self.worker is None:
                    return None
                if self.worker.silent_s() < WAIT_S:
                    continue  # answering the requests before this one: busy, not stuck
                self.worker.close()  # stuck: do without it from now on
                return None

    def forget(self, key: DocKey) -> None:
        """Drop a document stored (or failed) in full."""
        self._docs.pop(key, None)

    def close(self) -> None:
        """Stop the helper and forget every document."""
        self._docs.clear()
        if self.worker is not None:
            self.worker.close()


def _split(texts: list[str], settings: "SplitterSettings") -> "list[list[TextChunk]]":
    from archivist.ingest.splitter import split_text

    return [split_text(text, settings) for text in texts]


def _vectors(texts: list[str], scheme: str) -> list[SparseVector]:
    from archivist.tools import sparse

    return sparse.document_vectors(texts, scheme)


def _load(report: Callable[[Any], None], path: Path, options: Any, seconds: float) -> Any:
    """Load a file, its progress events (OCR's pages) reported ahead of the answer; a file
    that cannot be ingested answers its LoadError, which the ingest raises as its own.

    Past `seconds` this process ends, whatever it is doing: the ingest kills it sooner, so
    this is for when the ingest itself is gone (killed with SIGKILL) during an endless load.
    SIGALRM's default action is the kernel's, needing no Python, which a regex may hold."""
    from archivist.ingest.loaders import LoadError, load
    from archivist.ingest.loaders.base import reporting

    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    with reporting(report):
        try:
            return load(path, options)
        except LoadError as exc:
            return exc
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)


TASKS: dict[str, Callable[..., Any]] = {"vectors": _vectors, "split": _split}
REPORTING: dict[str, Callable[..., Any]] = {"load": _load}
"""Tasks given, before their arguments, a callable that sends an event ahead of the answer."""
READY = "ready"
"""Sent, as an event, by a child started with `--loads` once it has imported the loaders."""


def serve(requests, answers) -> None:
    """Answer pickled `(task, args)` requests, in order, until EOF: each answer `(ok, value)`,
    after the events a reporting task sends, each `(None, event)`."""

    def send(ok: bool | None, value: Any) -> None:
        pickle.dump((ok, value), answers, protocol=pickle.HIGHEST_PROTOCOL)
        answers.flush()

    def report(event: Any) -> None:
        send(None, event)

    while True:
        try:
            task, args = pickle.load(requests)
        except EOFError:
            return
        try:
            if task in REPORTING:
                answer = (True, REPORTING[task](report, *args))
            else:
                answer = (True, TASKS[task](*args))
        except Exception as exc:  # the ingest process does this work itself, and fails alike
            answer = (False, repr(exc))
        send(*answer)


if __name__ == "__main__":
    channel = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident can corrupt the answers
    try:
        if sys.argv[1:] == ["--loads"]:
            # Imported before saying so: a load's time budget is for the load alone.
            import archivist.ingest.loaders  # noqa: F401

            pickle.dump((None, READY), channel, protocol=pickle.HIGHEST_PROTOCOL)
            channel.flush()
        serve(sys.stdin.buffer, channel)
    except (BrokenPipeError, KeyboardInterrupt):
        os._exit(0)
