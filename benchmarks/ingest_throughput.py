"""Measure ingest throughput against the fake Ollama with a per-text embedding cost.

The fake serves `--parallel` embedding requests at a time (like OLLAMA_NUM_PARALLEL) and
sleeps `--per-text` seconds per input, so the figures show what batching and concurrency buy
when the model, not Archivist, is the bottleneck.
Run: .venv/bin/python benchmarks/ingest_throughput.py
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from fake_ollama import FakeOllama  # noqa: E402

from archivist.app import Archivist  # noqa: E402
from archivist.ingest.embedder import EmbedSettings  # noqa: E402
from archivist.settings import Settings  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--copies", type=int, default=10, help="copies of examples/shop")
    parser.add_argument("--per-text", type=float, default=0.004, help="seconds per input")
    parser.add_argument("--parallel", type=int, default=2, help="requests the fake serves")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "kb"
        for i in range(args.copies):
            shutil.copytree(ROOT / "examples" / "shop", corpus / f"copy{i}")
        print(
            f"{args.copies * 10} files; fake: {args.per_text * 1000:g} ms per text, "
            f"{args.parallel} requests in parallel"
        )
        print("batch  concurrency  chunks  seconds  chunks/s")
        for batch, concurrency in [(1, 1), (8, 1), (32, 1), (32, 2), (64, 2), (64, 4)]:
            with FakeOllama(
                embed_delay=0.01,
                embed_delay_per_text=args.per_text,
                embed_concurrency=args.parallel,
            ) as fake:
                home = Path(tmp) / f"home-{batch}-{concurrency}"
                app = Archivist(Settings(ollama_host=fake.url, home=home))
                started = time.perf_counter()
                report = app.ingest(
                    [str(corpus)],
                    "bench",
                    embed=EmbedSettings(batch_size=batch, concurrency=concurrency),
                )
                seconds = time.perf_counter() - started
                app.close()
            chunks = report.chunks_embedded
            print(
                f"{batch:>5}  {concurrency:>11}  {chunks:>6}  {seconds:>7.2f}  "
                f"{chunks / seconds:>8.0f}"
            )


if __name__ == "__main__":
    main()
