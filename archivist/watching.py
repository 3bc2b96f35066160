"""Keep stores in sync with their roots while files change (`sync --watch`).

File system events (watchfiles, Rust's notify) are debounced into batches, so an editor's
save-by-rename or a checkout touching 1,000 files is one batch. Before a batch is read, the
files it names must hold still (the same size and modification time twice, a moment apart):
a file still being written waits, and is not stored torn. Each root a batch touches is then
synced as `archivist sync` does (unchanged files are not even hashed), between batches the
store is released so a chat beside it reads as usual, and every change is one line.
"""

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from archivist.tools.errors import ArchivistError
from archivist.tools.words import count

DEBOUNCE_MS = 400
"""How long events gather into one batch after the first (milliseconds)."""
SETTLE_S = 0.25
"""How long a changed file must keep its size and modification time to be read."""
SETTLE_LIMIT_S = 30.0
"""How long a batch waits for files still being written before reading them anyway."""
WATCH_POLL_S = 0.2
"""How often a watch with no root on disk looks for one to come back (seconds)."""


class Watcher:
    """Sync the roots of `stores` as their files change, until `stop` is set or Ctrl-C."""

    def __init__(
        self,
        app: Any,
        stores: Sequence[str],
        say: Callable[[str], None] = print,
        stop: threading.Event | None = None,
        debounce_ms: int = DEBOUNCE_MS,
        settle_s: float = SETTLE_S,
        on_ready: Callable[[int], None] | None = None,
    ) -> None:
        self.app = app
        self.stores = list(stores)
        self.say = say
        self.stop = stop or threading.Event()
        self.debounce_ms = debounce_ms
        self.settle_s = settle_s
        self.changes = 0
        """Changes synced so far (sources stored or removed)."""
        self.batches = 0
        """Batches synced so far."""
        self.ready = threading.Event()
        """Set once the watch has begun (events from then on are seen)."""
        self.on_ready = on_ready
        """Told, once the watch has begun, how many roots it watches."""

    def targets(self) -> list[tuple[str, Any]]:
        """(store, root) of every folder and file root of the stores."""
        try:
            found = self.app.recorded_roots(self.stores)
        finally:
            self.app.close()  # released between batches: a chat beside it reads as usual
        return [(store, root) for store, root in found if root.kind in ("folder", "file")]

    def run(self) -> None:
        """Watch until `stop` is set or Ctrl-C (then what was being stored is finished or
        left whole for the next run, never half-stored). A watched folder deleted, or made
        anew (a new folder at the same path, which file system events never name), is told
        and watched again once it is there, its root synced."""
        targets = self.targets()
        places = sorted(
            {root.location if root.kind == "folder" else str(Path(root.location).parent)
             for _, root in targets}
        )  # fmt: skip
        if not any(os.path.isdir(p) for p in places):
            raise ArchivistError(
                "None of the roots to watch is on disk.",
                "Check them with: archivist sources --store NAME",
            )
        try:
            seen = {p: _identity(p) for p in places}
            back: list[tuple[str, Any]] = []
            while not self.stop.is_set():
                now = self._watch(places, seen, targets, back)
                if now is None:
                    return
                back = self._moved(seen, now, targets)
                seen = now
        except KeyboardInterrupt:
            return

    def _watch(
        self,
        places: list[str],
        seen: dict[str, Any],
        targets: list[tuple[str, Any]],
        back: list[tuple[str, Any]],
    ) -> dict[str, Any] | None:
        """Watch the places on disk until one of `places` is deleted or made anew (return
        what each is now) or the watch stops (None); the roots `back` on disk are synced
        once the watch has begun, so nothing written meanwhile is missed."""
        import watchfiles

        there = [p for p in places if seen[p] is not None]
        if not there:  # nothing to watch until a root comes back
            self.ready.set()
            while not self.stop.wait(WATCH_POLL_S):
                now = {p: _identity(p) for p in places}
                if now != seen:
                    return now
            return None
        events = watchfiles.watch(
            *there,
            stop_event=self.stop,
            debounce=self.debounce_ms,
            step=50,
            yield_on_timeout=True,
            rust_timeout=200,
            raise_interrupt=True,
            ignore_permission_denied=True,
        )
        for changes in events:
            if not self.ready.is_set():
                self.ready.set()
                if self.on_ready is not None:
                    self.on_ready(len(targets))
            if back:
                for store, root in back:
                    self._sync_root(store, root)
                self.batches += 1
                back = []
            if changes:
                self.sync_changes({Path(path) for _, path in changes}, targets)
            now = {p: _identity(p) for p in places}
            if now != seen:
                return now
        return None

    def _moved(
        self, seen: dict[str, Any], now: dict[str, Any], targets: list[tuple[str, Any]]
    ) -> list[tuple[str, Any]]:
        """Tell what became of the watched folders that moved; return the roots of those
        back on disk, to sync."""
        back: set[Path] = set()
        for place in sorted(now):
            if now[place] == seen[place]:
                continue
            if now[place] is None:
                self.say(f"{place} is missing: its sources are kept; watching for it to return.")
            else:
                self.say(f"{place} is on disk again: syncing it.")
                back.add(Path(place))
        return [
            (store, root)
            for store, root in targets
            if any(_touches(root, {p}) or Path(root.location) == p for p in back)
        ]

    def sync_changes(self, paths: set[Path], targets: list[tuple[str, Any]]) -> None:
        """Sync the roots these changed paths are in, once the files hold still; again while
        a file read meanwhile has changed since."""
        touched = [(store, root) for store, root in targets if _touches(root, paths)]
        if not touched:
            return
        stats = self._settled(paths)
        for _ in range(5):
            for store, root in touched:
                self._sync_root(store, root)
            moved = {p for p, stat in stats.items() if _stat(p) != stat}
            if not moved:
                break
            stats = self._settled(moved)  # grew while it was read: read it again
        self.batches += 1

    def _settled(self, paths: set[Path]) -> dict[Path, tuple[int, int] | None]:
        """Wait until each path keeps its size and modification time for `settle_s` (up to
        SETTLE_LIMIT_S); return them."""
        stats = {p: _stat(p) for p in paths}
        waiting = set(paths)
        deadline = time.monotonic() + SETTLE_LIMIT_S
        while waiting and time.monotonic() < deadline and not self.stop.is_set():
            time.sleep(self.settle_s)
            moved = set()
            for p in waiting:
                now = _stat(p)
                if now != stats[p]:
                    stats[p] = now
                    moved.add(p)
            waiting = moved
        return stats

    def _sync_root(self, store: str, root: Any) -> None:
        try:
            request = self.app.sync_request(store, root)
            report = self.app.ingest(request, release=True)
        except ArchivistError as exc:
            self.say(f"{store}: {exc.message}")
            return
        for item in report.stored:
            chunks = count(item["chunks"], "chunk")
            self.say(f"{store}: {item['status']} {item['source']} ({chunks})")
        emptied = {s["source"] for s in report.skipped if s["reason"] == "empty file"}
        for source in report.removed:
            self.say(f"{store}: removed {source}" + (" (emptied)" if source in emptied else ""))
        for failure in report.failed:
            self.say(f"{store}: failed {failure['source']}: {failure['reason']}")
        self.changes += len(report.stored) + len(report.removed)


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_size, found.st_mtime_ns


def _identity(place: str) -> tuple[int, int] | None:
    """A folder's device and inode: another folder made at the same path has others."""
    try:
        found = os.stat(place)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if os.path.isdir(place) else None


def _touches(root: Any, paths: set[Path]) -> bool:
    if root.kind == "file":
        return Path(root.location) in paths
    base = root.location.rstrip(os.sep) + os.sep
    return any(str(p).startswith(base) or str(p) == root.location for p in paths)
