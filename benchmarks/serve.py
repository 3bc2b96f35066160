"""Print what `archivist serve` costs a client: the time to the first streamed token of an
answer, and the requests per second 20 clients at once get.

Run: .venv/bin/python benchmarks/serve.py [--requests 10] [--clients 20] [--each 5]
(no Ollama needed: the test fake answers at once, so what is measured is Archivist's own
work: the HTTP API, the agent's two model calls, the query's embedding and the search.)

The shop example is ingested into a temporary home, `archivist serve` is started on it as a
process, warmed with one request, then asked over HTTP as a client would ask it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_ollama import FakeOllama  # noqa: E402

from archivist.app import Archivist  # noqa: E402
from archivist.settings import Settings  # noqa: E402

QUESTION = "How many days do I have to ask for a refund?"


def start(ollama_url: str, home: str, log: Path) -> tuple[subprocess.Popen, str]:
    """`archivist serve` on a free port; its process and /v1 URL once it listens."""
    env = {**os.environ, "OLLAMA_HOST": ollama_url, "ARCHIVIST_HOME": home}
    with open(log, "w") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "archivist", "serve", "--port", "0"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    deadline = time.monotonic() + 120
    while "Serving the OpenAI API at" not in log.read_text():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(log.read_text())
        time.sleep(0.05)
    return process, log.read_text().split("Serving the OpenAI API at ", 1)[1].split()[0]


def first_token(http: httpx.Client, url: str) -> tuple[float, float]:
    """Seconds from sending a streamed request to its first reasoning (the search shown) and
    to its first answer token."""
    body = {"model": "archivist/shop_docs", "stream": True, "messages": [
        {"role": "user", "content": QUESTION}]}  # fmt: skip
    started = time.perf_counter()
    searched = None
    with http.stream("POST", f"{url}/chat/completions", json=body) as response:
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            delta = json.loads(line[6:])["choices"][0]["delta"]
            if searched is None and delta.get("reasoning_content"):
                searched = time.perf_counter() - started
            if delta.get("content"):
                return searched or 0.0, time.perf_counter() - started
    raise SystemExit("the stream ended without a token")


def whole(http: httpx.Client, url: str) -> None:
    body = {"model": "archivist/shop_docs", "messages": [{"role": "user", "content": QUESTION}]}
    response = http.post(f"{url}/chat/completions", json=body)
    response.raise_for_status()
    assert "[1]" in response.json()["choices"][0]["message"]["content"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10, help="streamed requests timed")
    parser.add_argument("--clients", type=int, default=20, help="clients at once")
    parser.add_argument("--each", type=int, default=5, help="whole answers each client asks")
    args = parser.parse_args()
    with FakeOllama() as ollama, tempfile.TemporaryDirectory() as home:
        app = Archivist(Settings(ollama_host=ollama.url, home=Path(home)))
        app.ingest([str(ROOT / "examples" / "shop")], "shop_docs", release=True)
        process, url = start(ollama.url, home, Path(home) / "serve.log")
        try:
            with httpx.Client(timeout=120) as http:
                whole(http, url)  # warm: the agent is built on the first request
                timings = [first_token(http, url) for _ in range(args.requests)]
            searched = [s for s, _ in timings]
            tokens = sorted(t for _, t in timings)
            print(
                f"first streamed token ({args.requests} requests, warm server): median "
                f"{statistics.median(tokens):.3f} s, worst {tokens[-1]:.3f} s "
                f"(the search shown after {statistics.median(searched):.3f} s)"
            )
            total = args.clients * args.each
            with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=100)) as http:
                started = time.perf_counter()
                with ThreadPoolExecutor(args.clients) as pool:
                    list(pool.map(lambda _: whole(http, url), range(total)))
                seconds = time.perf_counter() - started
            print(
                f"{args.clients} clients at once: {total} whole answers in {seconds:.2f} s, "
                f"{total / seconds:.1f} requests/s"
            )
        finally:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
