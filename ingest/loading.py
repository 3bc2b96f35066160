"""Loading files within a time budget, in a child process that is killed when a load overruns.

A hostile or pathological file can hold a loader for minutes: Python's regex engine keeps the
interpreter until a match ends, a parser can loop, a LangChain loader named with `--loader`
can do anything. Python cannot stop a function running in one of its own threads, so with a
budget each file is loaded in a child process, the helper's program
(`python -m archivist.ingest.worker --loads`, in its own session, speaking pickles over its
stdin and stdout). A load that overruns has its child killed, with anything the child
started; its file fails with the limit and the setting that raises it, the next file gets a
new child, and the run goes on. A child that dies while reading (a crash in a parser, the
kernel's out-of-memory killer) fails that file alone, the same way.

There is no fast path around the child for small or simple-looking files: a few KB were
enough for the patterns that used to backtrack, so neither size nor format tells a safe file
from a hostile one. Small ingests stay cheap another way: one child serves the whole run, and
a run into a new store (where every file is loaded) starts it as the run begins (`start`), so
its own start (Python and the loaders' imports, about 0.2 s of CPU) runs on another core
while the ingest creates the store and finds the files; other runs start it at their first
load, and a run with nothing to load never does. When a run ends with its child idle, the
child is kept for the process's next run (one spare at most, stopped at exit): a watch's
batches, a notebook's ingests one after another, each start no new Python. A load's time
counts from the moment the child has its request, never including the child's start. With
the budget off (`seconds` 0 or None), or if no child can start, loads are made in this
process, as before the budget.

OCR is slow by nature (seconds a page): a load that turns to OCR (its first page's progress
event) is given OCR_FACTOR times the budget.
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
from collections.abc import Sequence
from typing import Any

from archivist.ingest.loaders import LoaderOptions, LoadError, Section
from archivist.ingest.loaders.base import report
from archivist.ingest.sync import SourceFile, load_sections, options_for
from archivist.ingest.worker import READY, interrupts_held
from archivist.tools.progress import Recognised

DEFAULT_SECONDS = 120.0
"""The budget of one file's load when none is set (`ARCHIVIST_LOAD_TIMEOUT`): honest files
load in seconds at most (a 50 MB text file, a workbook streaming 256 MB of XML at about
20 MB a second), so only a file that makes a loader misbehave comes near it."""
OCR_FACTOR = 5
"""A load that reads pages by OCR gets this many times the budget (600 s by default): the
100 pages OCR reads at most, at a few seconds a page on a laptop CPU, fit in it."""
SETTING = "ARCHIVIST_LOAD_TIMEOUT"
START_S = 60.0
"""How long a child may take to start before loads are made in this process instead."""

_ENDED = object()
_spare: "_Child | None" = None
"""An idle child a finished run left for the next one (see `Loads.close`)."""
_spare_lock = threading.Lock()


class _Child:
    """One loading process and the thread reading its messages into `inbox`."""

    command: Sequence[str] = (sys.executable, "-m", "archivist.ingest.worker", "--loads")

    def __init__(self) -> None:
        self.started_in = (os.getcwd(), dict(os.environ))
        """The folder and environment it started in: a spare serves only runs in the same
        (a loader named with `--loader` is imported from them)."""
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,  # Ctrl-C reaches the ingest; a kill reaches its group
        )
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.ready = False
        self.busy = False
        """Whether a request is in hand (a run interrupted while waiting for a load)."""
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        try:
            while True:
                self.inbox.put(pickle.load(stream))
        except Exception:  # EOF, or anything but our messages: the child is gone or lost
            pass
        finally:
            self.inbox.put(_ENDED)

    def send(self, request: tuple[str, tuple[Any, ...]]) -> None:
        """Send one request (raises OSError if the child is gone)."""
        pickle.dump(request, self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        self.busy = True

    def ended(self) -> str:
        """How the child ended, once it has: an exit status or the signal that stopped it."""
        code = self.process.wait()
        if code < 0:
            with contextlib.suppress(ValueError):
                return signal.Signals(-code).name
        return f"exit status {code}"

    def kill(self) -> None:
        """Stop the child at once, with whatever it started."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self._reap()

    def close(self) -> None:
        """Let an idle child finish (its stdin closes, it exits); stop a busy one at once."""
        if self.busy:
            self.kill()
            return
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
        self._reap()

    def _reap(self) -> None:
        self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                stream.close()


class Loads:
    """One run's loads of the files that are read whole: each in a child process within
    `seconds`, or in this process without a limit (`seconds` 0 or None; no child can start)."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds or 0.0
        self._child: _Child | None = None
        self._here = not self.seconds
        """Whether loads are made in this process."""

    def start(self) -> None:
        """Start the child now, ahead of the first load, if there is a budget (or take the
        one an earlier run left)."""
        if self._here or self._child is not None:
            return
        # However the run ends (even interrupted between two of its steps, or while the child
        # starts), the child is waited for before this process exits.
        with interrupts_held():
            self._child = _take_spare()
            if self._child is None:
                try:
                    self._child = _Child()
                except OSError:
                    self._here = True
                    return
            atexit.register(self.close)

    def load(self, file: SourceFile, options: LoaderOptions) -> list[Section]:
        """Load a file that is read whole: its sections, as `sync.load_sections` gives them;
        raise LoadError with the reason, the budget's when its load overran."""
        child = self._ready()
        if child is None:
            return load_sections(file, options)
        # The child ends itself a little after the longest this process would wait.
        request = ("load", (file.path, options_for(file, options), self._longest() + 10))
        try:
            child.send(request)
        except OSError:  # the child ended between two files: a new one takes this file
            self._drop(child)
            child = self._ready()
            if child is None:
                return load_sections(file, options)
            child.send(request)
        return self._answer(child)

    def _longest(self) -> float:
        """The most a load may take: the budget of one reading pages by OCR."""
        return self.seconds * OCR_FACTOR

    def _ready(self) -> _Child | None:
        """The child, started if need be and ready for a request (None: load here)."""
        self.start()
        child = self._child
        if child is None or child.ready:
            return child
        try:
            message = child.inbox.get(timeout=START_S)
        except queue.Empty:
            message = None
        if message != (None, READY):  # it could not start, or not in time: do without it
            self._drop(child)
            self._here = True
            return None
        child.ready = True
        return child

    def _answer(self, child: _Child) -> list[Section]:
        """Wait for the child's answer to a load, passing its events on, within the budget."""
        seconds = self.seconds
        ocr = False
        deadline = time.monotonic() + seconds
        while True:
            try:
                message = child.inbox.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._drop(child, kill=True)
                raise LoadError(_overran(seconds, ocr)) from None
            if message is _ENDED:
                self._drop(child)
                raise LoadError(
                    f"reading it stopped the loading process ({child.ended()}): a damaged "
                    "or hostile file"
                )
            ok, value = message
            if ok is None:
                if isinstance(value, Recognised) and not ocr:
                    ocr = True
                    deadline += seconds * (OCR_FACTOR - 1)
                report(value)
                continue
            child.busy = False
            if not ok:  # what the child's answer could not carry
                raise LoadError(f"unreadable file ({value})")
            if isinstance(value, LoadError):
                raise value
            return value

    def _drop(self, child: _Child, kill: bool = False) -> None:
        """Forget a child that ended or overran (killed): the next load starts another."""
        if kill:
            child.kill()
        else:
            child.close()
        if self._child is child:
            self._child = None

    def close(self) -> None:
        """Leave an idle child for the next run, or stop it (it exits once its stdin closes)."""
        child, self._child = self._child, None
        atexit.unregister(self.close)
        if child is not None:
            _keep_spare(child)


def _take_spare() -> _Child | None:
    """The child an earlier run left, if it is still there and this process is still in the
    folder and environment it started in."""
    global _spare
    with _spare_lock:
        child, _spare = _spare, None
    if child is not None and (
        child.process.poll() is not None or child.started_in != (os.getcwd(), dict(os.environ))
    ):
        child.close()
        return None
    return child


def _keep_spare(child: _Child) -> None:
    """Keep an idle, ready child for the next run (the one kept before is stopped); stop a
    busy one, or one that never got ready."""
    global _spare
    if child.busy or not child.ready or child.process.poll() is not None:
        child.close()
        return
    with _spare_lock:
        child, _spare = _spare, child
    if child is not None:
        child.close()
    atexit.unregister(_stop_spare)  # registered once, however many runs leave a child
    atexit.register(_stop_spare)


def _stop_spare() -> None:
    child = _take_spare()
    if child is not None:
        child.close()


def _overran(seconds: float, ocr: bool) -> str:
    """The reason a load that overran its budget fails with: the limit, and how to raise it."""
    more = seconds * 2
    raise_it = f"--load-timeout {more:g} or {SETTING}={more:g} (0: no limit)"
    if ocr:
        return (
            f"OCR took longer than the {seconds * OCR_FACTOR:g} s limit of a file read by OCR "
            f"({OCR_FACTOR} × the {seconds:g} s per file): split the PDF, or raise the limit "
            f"with {raise_it}"
        )
    return (
        f"loading took longer than the {seconds:g} s limit per file (a file that makes its "
        f"loader loop?); if it is an honest file, raise the limit with {raise_it}"
    )
