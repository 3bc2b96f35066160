"""Print what a served agent turn costs in-process: milliseconds and /api/show requests.

Run: .venv/bin/python benchmarks/served_turn.py   (no Ollama needed: it uses the test fake)

It invokes `archivist.serving.graphs.agent_graph` three times, as LangGraph Server runs it, against
the fake Ollama and a store of the shop example.
"""

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_ollama import FakeOllama  # noqa: E402

from archivist.app import Archivist  # noqa: E402
from archivist.serving.graphs import agent_graph, release_setups  # noqa: E402
from archivist.settings import Settings  # noqa: E402

QUESTION = "How many days do I have to ask for a refund?"


def main() -> None:
    with FakeOllama() as ollama, tempfile.TemporaryDirectory() as home:
        app = Archivist(Settings(ollama_host=ollama.url, home=Path(home)))
        app.ingest([str(ROOT / "examples" / "shop")], "shop_docs", release=True)
        context = {"ollama_host": ollama.url, "home": home, "stores": ["shop_docs"]}
        for turn in range(1, 4):
            ollama.clear_requests()
            started = time.perf_counter()
            agent_graph.invoke(
                {"messages": [{"role": "user", "content": QUESTION}]}, context=context
            )
            ms = (time.perf_counter() - started) * 1000
            shows = len(ollama.requests_to("/api/show"))
            print(f"served turn {turn}: {ms:7.1f} ms, /api/show requests: {shows}")
        release_setups()


if __name__ == "__main__":
    main()
