"""Turns at the embedded store: which process may open its shards, and when it gives them up.

Qdrant Edge lets one process at a time open a shard (its write-ahead log is locked while
open; a second `EdgeShard.load` fails), so the processes sharing a home take turns (see
docs/concurrency.md). A `Lease` is an exclusive file lock that its holder keeps while nobody
else needs the store, and gives up within about `YIELD_POLL` seconds of another process
asking for it (a `.want-*` file), unless it is in the middle of an operation: an idle chat
never keeps an ingest waiting, and an ingest lets a chat's search through between two of its
writes. The lock file names its holder (process id and command), for the messages of those
who wait.

A `WriterLock` is held by a process that writes for the whole of its run (ingest, delete,
migrate), so a second writer waits its turn while readers still get through.
"""

import fcntl
import itertools
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from archivist.tools.errors import StoreLocked

LEASE_FILE = ".lock"
WRITER_FILE = ".writer"
WANT_PREFIX = ".want-"
# How often a holder looks for processes waiting for the store.
YIELD_POLL = 0.05
# An idle holder gives the store up within this long (closing the shards of a 100,000-chunk
# store took up to ~0.9 s on a busy 2-core machine): even a process that cannot wait waits it.
YIELD_WAIT = 5.0
# How long after yielding a holder lets the waiting processes in before it asks again.
YIELD_GRACE = 2.0
# A wait shorter than this passes without a message.
NOTICE_AFTER = 1.0
POLL = 0.01

_ids = itertools.count()


def process_command() -> str:
    """Describe this process for those waiting on it: its program and arguments."""
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("python")
    # `python -m archivist` runs archivist/__main__.py: name the package, as a person typed.
    name = program.parent.name if program.name == "__main__.py" else program.name
    command = " ".join([name, *sys.argv[1:]])
    return command if len(command) <= 120 else command[:119] + "…"


def describe_holder(path: Path) -> str:
    """Name the process a lock file says holds it, or say it is unknown."""
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
        return f"process {holder['pid']} ({holder['command']})"
    except (OSError, ValueError, KeyError, TypeError):
        return "another Archivist process"


def stderr_notice(message: str) -> None:
    """Tell the person at the terminal why nothing happens yet."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


class _FileLock:
    """An exclusive lock on one file, naming its holder inside it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[str] | None = None

    def try_acquire(self) -> bool:
        file = self.path.open("a+", encoding="utf-8")
        try:
            # flock, as portalocker and qdrant-client's local mode take it (POSIX).
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            file.close()
            return False
        file.seek(0)
        file.truncate()
        file.write(json.dumps({"pid": os.getpid(), "command": process_command()}))
        file.flush()
        self._file = file
        return True

    def release(self) -> None:
        if self._file is not None:
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    @property
    def held(self) -> bool:
        return self._file is not None

    def fds(self) -> tuple[int, ...]:
        """The held lock's file descriptor (none if not held)."""
        return () if self._file is None else (self._file.fileno(),)


def _wait_for(
    lock: _FileLock,
    wait: float | None,
    notify: Callable[[str], None],
    waiting_for: str,
    before_try: Callable[[], None] = lambda: None,
    least: float = 0.0,
) -> None:
    """Take `lock`, waiting up to `wait` seconds (None: as long as it takes; at least `least`)
    for its holder."""
    wait = None if wait is None else max(wait, least)
    started = time.monotonic()
    noticed = False
    while True:
        before_try()
        if lock.try_acquire():
            return
        waited = time.monotonic() - started
        if wait is not None and waited >= wait:
            raise StoreLocked(
                f"The embedded store at {lock.path.parent} is {waiting_for} "
                f"{describe_holder(lock.path)}.",
                "Wait for it to finish (give --wait SECONDS to wait longer), or run a Qdrant "
                "server and set QDRANT_URL so several processes can write at once.",
            )
        if not noticed and waited >= min(NOTICE_AFTER, wait if wait is not None else 1e9):
            notify(f"Waiting for the store: it is {waiting_for} {describe_holder(lock.path)}…")
            noticed = True
        time.sleep(POLL)


class Lease:
    """The right to open a folder's shards, kept until another process asks for it."""

    def __init__(
        self,
        folder: Path,
        on_yield: Callable[[], None],
        wait: float | None = None,
        notify: Callable[[str], None] = stderr_notice,
    ) -> None:
        self.folder = folder
        # Held around every operation on the shards, so the store is never given up mid-way.
        self.mutex = threading.RLock()
        self._lock = _FileLock(folder / LEASE_FILE)
        self._on_yield = on_yield
        self._wait = wait
        self._notify = notify
        self._want = folder / f"{WANT_PREFIX}{os.getpid()}-{next(_ids)}"
        self._yielded_at = -YIELD_GRACE
        self._asked = threading.Event()  # another process waits: give up at the next chance
        self._watcher: threading.Thread | None = None

    @property
    def held(self) -> bool:
        return self._lock.held

    def acquire(self) -> None:
        """Take the store, asking its holder to give it up; call with `mutex` held."""
        if self.held:
            return
        # Just given up: let those waiting in before asking for it back.
        while self._others_waiting() and time.monotonic() - self._yielded_at < YIELD_GRACE:
            time.sleep(POLL)
        try:
            _wait_for(self._lock, self._wait, self._notify, "in use by", self._ask, YIELD_WAIT)
        finally:
            self._want.unlink(missing_ok=True)
        self._watcher = threading.Thread(target=self._watch, name="archivist-lease", daemon=True)
        self._watcher.start()

    def fds(self) -> tuple[int, ...]:
        """The lock's file descriptor while held: a child process given it holds the lease
        along with this one (an flock belongs to the open file), until both have let go."""
        return self._lock.fds()

    def release(self) -> None:
        """Give the store up; call with `mutex` held, after closing the shards."""
        self._lock.release()
        self._asked.clear()

    def yield_if_asked(self) -> None:
        """Between two operations of a busy holder: give the store up if another process
        waits for it (call with `mutex` held, at no depth of an operation)."""
        if self.held and self._asked.is_set():
            self._yield()

    def _yield(self) -> None:
        self._on_yield()
        self.release()
        self._yielded_at = time.monotonic()

    def _ask(self) -> None:
        if not self._want.exists():
            self._want.write_text(str(os.getpid()), encoding="utf-8")

    def _others_waiting(self) -> bool:
        try:
            entries = list(os.scandir(self.folder))
        except OSError:  # the folder was removed under an open client: nobody can wait
            return False
        for entry in entries:
            if not entry.name.startswith(WANT_PREFIX) or entry.path == str(self._want):
                continue
            pid = entry.name[len(WANT_PREFIX) :].split("-", 1)[0]
            if pid.isdigit() and _alive(int(pid)):
                return True
            # Left by a process that died waiting.
            Path(entry.path).unlink(missing_ok=True)
        return False

    def _watch(self) -> None:
        while self.held and self._watcher is threading.current_thread():
            time.sleep(YIELD_POLL)
            if not self._others_waiting():
                continue
            # Busy: the next operation gives it up before it starts. Idle: give it up now.
            self._asked.set()
            if not self.mutex.acquire(blocking=False):
                continue
            try:
                if self.held:
                    self._yield()
            finally:
                self.mutex.release()


class WriterLock:
    """One writer at a time: held for the whole of a writing command."""

    def __init__(
        self,
        folder: Path,
        wait: float | None = None,
        notify: Callable[[str], None] = stderr_notice,
    ) -> None:
        self._lock = _FileLock(folder / WRITER_FILE)
        self._wait = wait
        self._notify = notify
        self._depth = 0
        self._mutex = threading.Lock()

    @contextmanager
    def held(self) -> Iterator[None]:
        """Write while inside; a second writer waits (up to `wait` seconds) until it ends."""
        with self._mutex:
            if self._depth == 0:
                _wait_for(self._lock, self._wait, self._notify, "being written by")
            self._depth += 1
        try:
            yield
        finally:
            with self._mutex:
                self._depth -= 1
                if self._depth == 0:
                    self._lock.release()


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
