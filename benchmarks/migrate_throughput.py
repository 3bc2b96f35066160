"""Copy a store of synthetic chunks from one embedded home to another; print points/s.

.venv/bin/python benchmarks/migrate_throughput.py [--points 5000] [--batch 256]
"""

import argparse
import random
import tempfile
import time
from pathlib import Path

from archivist.tools.migrate import copy_store
from archivist.tools.store import Chunk, ChunkWrite, KnowledgeStore, connect

FINGERPRINT = {
    "embed_model": "synthetic",
    "dimension": 768,
    "document_prefix": "",
    "query_prefix": "",
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    rng = random.Random(7)
    words = "refund shipping warranty parcel tent boot jacket voucher invoice days".split()
    with tempfile.TemporaryDirectory() as tmp:
        source_client = connect(Path(tmp) / "a")
        source = KnowledgeStore(source_client, "docs")
        source.ensure(FINGERPRINT)
        for start in range(0, args.points, 500):
            chunks = [
                Chunk(" ".join(rng.choices(words, k=120)), f"doc{i // 8}.md", i % 8)
                for i in range(start, min(args.points, start + 500))
            ]
            vectors = [[rng.uniform(-1, 1) for _ in range(768)] for _ in chunks]
            source.upsert([ChunkWrite(c, v, "h", 8) for c, v in zip(chunks, vectors, strict=True)])
        target_client = connect(Path(tmp) / "b")
        started = time.perf_counter()
        copied = copy_store(source, KnowledgeStore(target_client, "docs"), batch=args.batch)
        seconds = time.perf_counter() - started
        print(
            f"{copied} points (768-d dense + BM25 sparse) copied in {seconds:.1f} s: "
            f"{copied / seconds:.0f} points/s, batch {args.batch}"
        )


if __name__ == "__main__":
    main()
