"""The turn log: every answered (or failed) turn, in SQLite, to list and inspect later."""

from __future__ import annotations

import json
import sqlite3
import stat
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archivist.agent.records import ToolCall, Turn
from archivist.home import ensure_home
from archivist.render import place_text, tool_line

if TYPE_CHECKING:  # listing the log needs no agent (nor LangGraph)
    from langchain_core.messages import BaseMessage

    from archivist.agent.setup import AgentSetup
    from archivist.tools.progress import ProgressFn

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,
    command TEXT NOT NULL,
    thread_id TEXT,
    model TEXT,
    mode TEXT,
    stores TEXT NOT NULL DEFAULT '[]',
    question TEXT NOT NULL,
    answer TEXT,
    tool_calls TEXT NOT NULL DEFAULT '[]',
    citations TEXT NOT NULL DEFAULT '[]',
    invalid_citations TEXT NOT NULL DEFAULT '[]',
    notes TEXT NOT NULL DEFAULT '[]',
    latency_ms INTEGER,
    input_tokens INTEGER,
    output_tokens INTEGER,
    error TEXT
);
CREATE INDEX IF NOT EXISTS turns_thread ON turns (thread_id, id);
"""
STOPPED = "stopped by the user"
"""The error a turn stopped with Ctrl-C, or left by its client (`TurnStopped`), is logged with."""
_JSON_COLUMNS = ("stores", "tool_calls", "citations", "invalid_citations", "notes")
_RESULT_FIELDS = ("n", "rank", "score", "source", "chunk_id")


class TurnStopped(Exception):
    """Raised from a turn's event handler when whoever asked has gone (a client that left a
    streamed answer): the turn stops there, logged as stopped by the user."""


def _logged_calls(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """Keep what identifies each retrieved chunk; its text stays in the store."""
    return [
        {
            **{k: v for k, v in call.items() if k != "results"},
            "results": [{k: r.get(k) for k in _RESULT_FIELDS} for r in call.get("results", [])],
        }
        for call in calls
    ]


class TurnLog:
    """The turns table in a SQLite file; each call opens its own short connection."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        ensure_home(self.path.parent)
        with closing(sqlite3.connect(self.path, timeout=10)) as db:
            if stat.S_IMODE(self.path.stat().st_mode) & 0o077:  # questions, answers, passages
                self.path.chmod(0o600)
            db.row_factory = sqlite3.Row
            db.executescript(_SCHEMA)
            with db:
                yield db

    def record(
        self,
        turn: Turn | dict[str, Any],
        command: str,
        thread_id: str | None = None,
        error: str | None = None,
    ) -> int:
        """Log a turn (an `ask --json` object, or what is known of a failed one); return its id."""
        usage = turn.get("usage") or {}
        row = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "command": command,
            "thread_id": thread_id,
            "model": turn.get("model"),
            "mode": turn.get("mode"),
            "stores": json.dumps(turn.get("stores", [])),
            "question": turn["question"],
            "answer": turn.get("answer"),
            "tool_calls": json.dumps(_logged_calls(turn.get("tool_calls", [])), ensure_ascii=False),
            "citations": json.dumps(turn.get("citations", []), ensure_ascii=False),
            "invalid_citations": json.dumps(turn.get("invalid_citations", [])),
            "notes": json.dumps(turn.get("notes", []), ensure_ascii=False),
            "latency_ms": turn.get("latency_ms"),
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "error": error,
        }
        with self._connect() as db:
            cursor = db.execute(
                f"INSERT INTO turns ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                list(row.values()),
            )
            return int(cursor.lastrowid or 0)

    def recent(self, limit: int = 20) -> list[dict[str, Any]]:
        """Return the latest turns, newest last."""
        with self._connect() as db:
            rows = db.execute("SELECT * FROM turns ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [_turn(row) for row in reversed(rows)]

    def get(self, turn_id: int) -> dict[str, Any] | None:
        """Return one turn, or None."""
        with self._connect() as db:
            row = db.execute("SELECT * FROM turns WHERE id = ?", (turn_id,)).fetchone()
        return _turn(row) if row else None

    def last_thread(self, command: str = "chat") -> str | None:
        """Return the thread of the latest turn logged by `command`, if any."""
        with self._connect() as db:
            row = db.execute(
                "SELECT thread_id FROM turns WHERE command = ? AND thread_id IS NOT NULL "
                "ORDER BY id DESC LIMIT 1",
                (command,),
            ).fetchone()
        return row["thread_id"] if row else None


def logged_turn(
    log: TurnLog,
    command: str,
    setup: AgentSetup,
    question: str,
    thread_id: str | None = None,
    on_event: ProgressFn | None = None,
    history: Sequence[BaseMessage] = (),
) -> Turn:
    """Run a turn (after `history`, see `run_turn`) and log it; a failed or stopped turn is
    logged with its error, the searches it finished and the answer it had begun to stream."""
    from archivist.agent.turn import run_turn
    from archivist.tools.progress import Searched, Token

    calls: list[ToolCall] = []
    streamed: list[str] = []

    def heard(event: Any) -> None:
        # What a turn cut short has shown so far: its searches, and the answer begun since.
        if isinstance(event, Searched):
            calls.append(event.call)
            streamed.clear()
        elif isinstance(event, Token):
            streamed.append(event.text)
        if on_event is not None:
            on_event(event)

    started = time.perf_counter()
    try:
        result = run_turn(setup, question, thread_id, heard, history)
    except BaseException as exc:
        reason = STOPPED if isinstance(exc, KeyboardInterrupt | TurnStopped) else repr(exc)
        partial = {
            "question": question,
            "model": setup.model,
            "mode": setup.mode,
            "stores": setup.stores,
            "tool_calls": calls,
            "answer": "".join(streamed) or None,
            "latency_ms": round((time.perf_counter() - started) * 1000),
        }
        log.record(partial, command, thread_id, error=reason)
        raise
    log.record(result, command, thread_id)
    return result


def _turn(row: sqlite3.Row) -> dict[str, Any]:
    turn = dict(row)
    for column in _JSON_COLUMNS:
        turn[column] = json.loads(turn[column])
    return turn


def summary(turn: dict[str, Any]) -> str:
    """One line per turn, for `archivist logs`."""
    searches = len(turn["tool_calls"])
    rewrites = sum(1 for c in turn["tool_calls"] if "rewritten_from" in c)
    rewritten = f" ({rewrites} rewritten)" if rewrites else ""
    if turn["error"] == STOPPED:
        outcome = f"stopped after {turn['latency_ms']} ms"
    elif turn["error"]:
        outcome = f"error: {turn['error']}"
    else:
        outcome = f"{turn['latency_ms']} ms"
    question = " ".join(turn["question"].split())
    if len(question) > 60:
        question = question[:59] + "…"
    return (
        f"{turn['id']:>4}  {turn['at']}  {turn['command']:<4}  {turn['model']}  {turn['mode']}  "
        f"{searches} search{'es' if searches != 1 else ''}{rewritten}  {outcome}  {question}"
    )


def details(turn: dict[str, Any]) -> str:
    """Everything logged about a turn, for `archivist logs show ID`."""
    lines = [
        f"Turn {turn['id']} · {turn['at']} · {turn['command']}"
        + (f" · thread {turn['thread_id']}" if turn["thread_id"] else ""),
        f"Model: {turn['model']} ({turn['mode']}) · stores: {', '.join(turn['stores'])}",
        f"Question: {turn['question']}",
    ]
    for call in turn["tool_calls"]:
        lines.append(tool_line(call))
        grades = {g["n"]: g["relevant"] for g in call.get("grades", [])}
        shown = call.get("shown")
        for r in call["results"]:
            mark = ""
            if "kept" in call:
                verdict = grades.get(r["n"])
                mark = "  relevant" if verdict else "  irrelevant" if verdict is False else ""
                if shown is not None and r["n"] not in shown:
                    mark += ", not shown"
            lines.append(f"  [{r['n']}] {place_text(r)}  chunk {r['chunk_id']}{mark}")
        if call.get("grading_error"):
            lines.append(f"  grading failed (all kept): {call['grading_error']}")
        if call.get("rewrite_error"):
            lines.append(f"  no rewrite: {call['rewrite_error']}")
    if turn["answer"] is not None:
        cut = " (cut short)" if turn["error"] else ""
        lines.append(f"Answer{cut}: {turn['answer']}")
    if turn["citations"]:
        lines.append(
            "Citations: " + " · ".join(f"[{c['n']}] {place_text(c)}" for c in turn["citations"])
        )
    if turn["invalid_citations"]:
        lines.append(f"Cited but not retrieved: {turn['invalid_citations']}")
    lines += [f"Note: {note}" for note in turn["notes"]]
    tokens = (
        f" · tokens: {turn['input_tokens']} in, {turn['output_tokens']} out"
        if turn["input_tokens"] is not None
        else ""
    )
    lines.append(f"Latency: {turn['latency_ms']} ms{tokens}")
    if turn["error"] == STOPPED:
        lines.append("Stopped by the user (Ctrl-C).")
    elif turn["error"]:
        lines.append(f"Error: {turn['error']}")
    return "\n".join(lines)
