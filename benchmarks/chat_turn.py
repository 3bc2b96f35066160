"""Print what the chat adds to a turn: the context guard's cost, and a turn's overhead.

Run: .venv/bin/python benchmarks/chat_turn.py   (no Ollama needed: it uses the test fake)
"""

import sqlite3
import sys
import tempfile
import time
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.sqlite import SqliteSaver

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_ollama import FakeOllama  # noqa: E402

from archivist.agent.context import fit_messages  # noqa: E402
from archivist.app import Archivist  # noqa: E402
from archivist.settings import Settings  # noqa: E402
from archivist.terminal.conversation import Conversation  # noqa: E402

PASSAGE = "Customers may request a refund within 30 days of delivery. " * 16  # ~1,000 chars


def history(turns: int) -> list:
    messages = []
    for i in range(turns):
        call = {"name": "search_docs", "args": {"query": f"q{i}"}, "id": f"c{i}"}
        results = "".join(
            f'\n<result n="{n}" source="d.md" score="0.5">\n{PASSAGE}\n</result>' for n in range(5)
        )
        messages += [
            HumanMessage(f"question {i}"),
            AIMessage("", tool_calls=[call]),
            ToolMessage(f"<search_results>{results}\n</search_results>", tool_call_id=f"c{i}"),
            AIMessage(f"answer {i} [1]"),
        ]
    return [*messages, HumanMessage("the new question")]


def main() -> None:
    print("context guard: fitting a history into 6,000 tokens")
    for turns in (10, 100, 500):
        messages = history(turns)
        started = time.perf_counter()
        fitted = fit_messages(messages, 6000, 8192)
        ms = (time.perf_counter() - started) * 1000
        kept = len(fitted.messages)
        print(f"  {turns:>4} turns ({len(messages)} messages): {ms:7.1f} ms, kept {kept}")

    with FakeOllama() as ollama, tempfile.TemporaryDirectory() as home:
        app = Archivist(Settings(ollama_host=ollama.url, home=Path(home)))
        app.ingest([str(ROOT / "examples" / "shop")], "shop_docs")
        with sqlite3.connect(Path(home) / "threads.sqlite", check_same_thread=False) as db:
            chat = Conversation(app, ["shop_docs"], SqliteSaver(db))
            firsts, totals = [], []
            for i in range(10):
                started = time.perf_counter()
                first: list[float] = []

                def on_event(kind, data, first=first, started=started):
                    if kind == "token" and not first:
                        first.append(time.perf_counter() - started)

                chat.answer(f"How many days do I have to ask for a refund? ({i})", on_event)
                totals.append(time.perf_counter() - started)
                firsts.append(first[0])
        app.close()
    firsts.sort()
    totals.sort()
    print("a chat turn against the in-process fake (search, two model calls, SQLite thread, log)")
    print(f"  first answer token after {firsts[5] * 1000:.0f} ms (median of 10)")
    print(f"  whole turn {totals[5] * 1000:.0f} ms (median of 10, history growing to 10 turns)")


if __name__ == "__main__":
    main()
