"""The first files of a new store embedded while the ingest graph's imports load.

An ingest with work to do imports LangGraph, LangChain and the Ollama client before its graph sends
a request: ~0.6 s of CPU during which the embedding model has nothing to do (and a real Ollama loads
the model only when the first request comes). So when a run fills a new store, the run's plan
(`archivist.ingest.pipeline.IngestPlan`) starts `EmbedAhead` as soon as it has found work: a child
process (`python -m archivist.ingest.ahead`, on the other core: a thread here would wait for the
interpreter while the imports hold it) reads the run's first files as the graph will (the same
discovery, loaders and splitter fitted to the model; only the files the text loaders read in
milliseconds, leaving PDFs, office files and images to the graph) and sends their chunks to the
embedding model it is handed (the one the graph embeds with, sent over the pipe: Archivist's
`OllamaEmbedder`, whose requests need no client library), a few requests at a time. Before each
request it names its texts; after, it sends their vectors. It stops sending once the graph has
caught up with it (the graph's embedder meets chunks it did not send: `stop`), or at AHEAD_REQUESTS
requests, finishes those on their way and exits; the ingest kills it when its run ends if it has
not.

The graph's embedding step takes those vectors by the exact text sent (`EmbedAhead.answered`, and
`AheadEmbeddings` around the embedding model): a request whose texts were all sent ahead is answered
without one of its own (waiting for an answer still on its way), and only the texts not sent ahead
are sent. Nothing depends on it: a text it did not send (another split, a file it did not reach, a
failed request) is sent by the graph as always, any failure of its own is forgotten, and what the
graph never asks for is dropped with the run. Chunk texts are the same whatever a file's hash, so
the child hashes no file.
"""

import atexit
import contextlib
import os
import pickle
import signal
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, Protocol

from archivist.ingest.request import IngestRequest

STOP_WAIT_S = 0.5
"""How long `stop` waits for the child to say it sends nothing more (it reads only quick
files; one that holds its loader longer sends nothing after it either, as it checks first)."""
AHEAD_REQUESTS = 64
"""The most requests sent ahead (4,096 chunks at the default batch size): more than the model
answers while the imports load (it is stopped then), a bound on what is held for the graph."""
TAKE_WAIT_S = 600.0
"""The most the graph waits for an answer to a request sent ahead before sending it again."""


class DocumentEmbedder(Protocol):
    """An embedding model that can be handed to another process (it pickles): documents'
    vectors for texts as given, their prefix included, each answer checked."""

    model: str

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]: ...

    def check_vectors(self, vectors: list[Any]) -> None:
        """Refuse vectors the model could not have answered (their count, kind, length)."""
        ...


def graph_imported() -> bool:
    """Whether the ingest graph's imports are loaded already: nothing to overlap then."""
    return "langgraph.graph" in sys.modules


class EmbedAhead:
    """Chunks sent to the embedder before the graph runs, and their vectors, by text."""

    command: Sequence[str] = (sys.executable, "-m", "archivist.ingest.ahead")

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix
        """The documents' task prefix, which the texts sent carry."""
        self._vectors: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._done_sending = threading.Event()
        self.requests: list[list[str]] = []
        """The texts of each request the child has sent, in order."""

    @classmethod
    def start(
        cls, embedder: DocumentEmbedder, request: IngestRequest, prefix: str, context: int
    ) -> "EmbedAhead | None":
        """Start embedding `request`'s first files into a new store with `embedder`, its
        documents' `prefix` and its `context` (tokens); None when the run is not one to start
        early (sites or a shard to read, chunk sizes that do not fit), the graph's imports are
        already loaded (a notebook's second ingest: nothing to overlap), or no child starts."""
        from archivist.ingest.worker import interrupts_held

        if graph_imported() or request.urls or request.shard:
            return None
        try:
            request = request.fitted(context, embedder.model)
        except ValueError:
            return None  # the graph's run refuses it, and says why
        try:
            job = pickle.dumps((embedder, request, prefix), protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return None  # an embedder bound to this process (a test's fake) embeds in the graph
        ahead = cls(prefix)
        with interrupts_held():  # however the ingest ends, the child is stopped with it
            try:
                ahead._process = subprocess.Popen(
                    cls.command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # Ctrl-C reaches the ingest, which stops it
                )
            except OSError:
                return None
            atexit.register(ahead.close)
        try:
            ahead._process.stdin.write(job)
            ahead._process.stdin.flush()
        except OSError:
            ahead.close()
            return None
        threading.Thread(target=ahead._read, name="embed-ahead", daemon=True).start()
        return ahead

    def stop(self) -> None:
        """Send nothing more (the child ends once the requests on their way are answered),
        and wait a little for the child to say it sends nothing more: then every text it
        sent is known here, and none is sent twice."""
        if self._process is not None:
            with contextlib.suppress(OSError):
                self._process.stdin.close()
        self._done_sending.wait(STOP_WAIT_S)

    @property
    def sent(self) -> int:
        """Requests the child has sent."""
        return len(self.requests)

    @property
    def sending(self) -> bool:
        """Whether the child may still send requests."""
        return not self._done_sending.is_set()

    def unknown(self, texts: Sequence[str]) -> int:
        """How many of `texts` were not sent ahead (yet)."""
        with self._lock:
            return sum(1 for text in texts if text not in self._vectors)

    def close(self) -> None:
        """Stop the child now, whatever it is doing; forget what it did not answer."""
        process, self._process = self._process, None
        if process is None:
            return
        atexit.unregister(self.close)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        with contextlib.suppress(OSError):
            process.stdin.close()

    def take(self, texts: Sequence[str]) -> list[list[float] | None]:
        """The vectors of `texts` that were sent ahead (waiting for those on their way), each
        given once; None for the others."""
        with self._lock:
            futures = [self._vectors.pop(text, None) for text in texts]
        found: list[list[float] | None] = []
        for future in futures:
            try:
                found.append(None if future is None else future.result(TAKE_WAIT_S))
            except Exception:  # noqa: BLE001 - failed or late: the graph sends it itself
                found.append(None)
        return found

    def answered(self, texts: Sequence[str]) -> list[list[float]] | None:
        """The vectors of documents `texts` (without their prefix) if every one was sent ahead
        and is back, each given once; else None, and nothing is taken (`HeldVectors`)."""
        texts = [self.prefix + text for text in texts]
        with self._lock:
            futures = [self._vectors.get(text) for text in texts]
            if not all(f is not None and f.done() and f.exception() is None for f in futures):
                return None
            for text in texts:
                self._vectors.pop(text, None)
        return [future.result() for future in futures]

    def _read(self) -> None:
        """Take the child's messages: ("sent", texts) before a request, then
        ("answer", vectors) or ("failed", None) for it, requests answered in any order, each
        message naming the request by its number."""
        process = self._process
        if process is None:
            return
        requests: dict[int, list[Future]] = {}
        try:
            while True:
                kind, number, value = pickle.load(process.stdout)
                if kind == "stopped":
                    self._done_sending.set()
                    continue
                if kind == "sent":
                    futures = [Future() for _ in value]
                    with self._lock:
                        for text, future in zip(value, futures, strict=True):
                            self._vectors.setdefault(text, future)
                    requests[number] = futures
                    self.requests.append(value)
                    continue
                futures = requests.pop(number)
                if kind == "answer":
                    for future, vector in zip(futures, value, strict=True):
                        future.set_result(vector)
                else:
                    for future in futures:
                        future.set_exception(RuntimeError("not answered"))
        except Exception:  # noqa: BLE001 - EOF (the child is done), or it is gone
            pass
        finally:
            self._done_sending.set()
            for futures in requests.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(RuntimeError("not answered"))
            with contextlib.suppress(OSError):
                process.stdout.close()


class AheadEmbeddings:
    """An embedding model's document embeddings (`inner`, given prefixed texts), taking the
    vectors of texts sent ahead instead of sending them again; every answer's vectors checked
    as `inner` checks."""

    def __init__(self, inner: DocumentEmbedder, ahead: EmbedAhead) -> None:
        self.inner = inner
        self.ahead = ahead

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.ahead.sending and self.ahead.unknown(texts) > 1:
            # The graph has caught up with the child: it sends its own requests from now on.
            # (Not for one text: the graph's dimension probe, sent as a new store is made.)
            self.ahead.stop()
        found = self.ahead.take(texts)
        missing = [text for text, vector in zip(texts, found, strict=True) if vector is None]
        if len(missing) == len(texts):
            return self.inner.embed_documents(texts)
        answered = iter(self.inner.embed_documents(missing) if missing else ())
        vectors = [next(answered) if vector is None else vector for vector in found]
        self.inner.check_vectors(vectors)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)


# -- the child ------------------------------------------------------------------------------


def quick_to_read(path: Any, options: Any) -> bool:
    """Whether a file is read by one of the text loaders (Markdown, reStructuredText, plain
    text, HTML, notebooks), in milliseconds: not a PDF, an office file or an image (OCR), nor
    a file a named LangChain loader (`--loader`) may read."""
    from archivist.ingest.loaders import LOADERS, suffix_of

    if options.extra_loaders:
        return False
    return LOADERS.get(suffix_of(path), ("text", ""))[0] == "text"


def embed_first_files(
    embedder: DocumentEmbedder,
    request: IngestRequest,
    prefix: str,
    say: Callable[[str, int, Any], None],
    stopping: threading.Event,
    slots: int,
) -> None:
    """Read the run's files in the graph's order and send their chunks in requests of the
    run's batch size, at most `slots` on their way, telling `say` of each; until `stopping`
    is set, AHEAD_REQUESTS are sent, a record file comes (the graph packs those its own way)
    or the files end. Wait for the requests on their way."""
    from archivist.ingest import roots as rooting
    from archivist.ingest.loaders import LoadError
    from archivist.ingest.sync import file_document, load_sections

    free = threading.BoundedSemaphore(slots)
    threads: list[threading.Thread] = []

    def exchange(number: int, texts: list[str]) -> None:
        try:
            say("answer", number, embedder.embed_documents(texts))
        except BaseException:  # noqa: BLE001 - the graph sends these texts again
            say("failed", number, None)
        finally:
            free.release()

    def send(texts: list[str]) -> bool:
        while not free.acquire(timeout=0.05):
            if stopping.is_set():
                return False
        if stopping.is_set() or len(threads) >= AHEAD_REQUESTS:
            free.release()
            return False
        say("sent", len(threads), texts)
        thread = threading.Thread(target=exchange, args=(len(threads), texts), daemon=True)
        threads.append(thread)
        thread.start()
        return True

    resolution = rooting.resolve(request.paths, rooting.RootSet.of({}), request.recorded_options())
    files, _, _ = rooting.discover_scopes(resolution, request)
    texts: list[str] = []
    batch = request.embed.batch_size
    for file in files:
        if stopping.is_set() or file.has_records:
            break
        if not quick_to_read(file.path, request.loader):
            continue  # the graph reads it: twice would cost seconds (OCR, a long PDF)
        try:
            sections = load_sections(file, request.loader)
            document = file_document(file, sections, request.splitter, "")
        except (LoadError, OSError):
            continue
        texts.extend(prefix + chunk.index_text for chunk in document.chunks)
        while len(texts) >= batch and send(texts[:batch]):
            del texts[:batch]
        if len(texts) >= batch:
            break
    # A last part-filled request is left to the graph, which fills it with what follows.
    say("stopped", len(threads), None)
    for thread in threads:
        thread.join()


def _main() -> None:
    channel = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed by accident can corrupt the messages
    job = pickle.load(sys.stdin.buffer)
    stopping = threading.Event()
    lock = threading.Lock()

    def say(kind: str, number: int, value: Any) -> None:
        with lock:
            pickle.dump((kind, number, value), channel, protocol=pickle.HIGHEST_PROTOCOL)
            channel.flush()

    def watch() -> None:
        sys.stdin.buffer.read()  # EOF: the ingest is about to run its graph, or is gone
        stopping.set()

    threading.Thread(target=watch, daemon=True).start()
    embedder, request, prefix = job
    embed_first_files(embedder, request, prefix, say, stopping, request.embed.concurrency)


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError, KeyboardInterrupt, EOFError):
        _main()
    os._exit(0)
