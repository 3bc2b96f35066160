"""What qdrant-edge's Python binding costs to take a point's payload, by the payload's shape.

    .venv/bin/python benchmarks/edge_payload.py [--points 20000] [--repeat 5]

A reproduction to report upstream: it imports nothing of Archivist, only `qdrant_edge` and
the standard library. For each payload shape it builds `qdrant_edge.Point`s with the same id
and vector (the binding converts the payload while the Point is made) and prints the best
time of `--repeat` runs in microseconds a point, beside the same data as one JSON string (the
cheapest form the binding takes: a single `str`). Then it upserts the points into a shard and
scrolls them back, to show the conversion on the way out too.

What it shows on qdrant-edge-py 0.9.0: a value's cost grows with how late its type comes in
the order the binding tries (bool, unsigned, signed, float, string, list, dict): three bools
cost about what an empty payload does, three ints more, three floats more again, three strings
the most of the scalars, and a nested dict pays for its own place and again for each value
inside. Each miss builds and drops a Python exception (about a microsecond). Checking the
exact Python type first (`PyBool`, `PyLong`, `PyFloat`, `PyString`, `PyList`, `PyDict`) would
make each value one check; the same conversion on the way out makes a scroll of nested
payloads about three times as slow as of packed ones.
"""

import argparse
import json
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

import qdrant_edge as qe

TEXT = "The tent's rainfly is seam-sealed; pitch it taut so the fabric never touches. " * 6
SHAPES: dict[str, Callable[[int], dict]] = {
    "empty {}": lambda i: {},
    "3 ints": lambda i: {"a": i, "b": i + 1, "c": i + 2},
    "3 floats": lambda i: {"a": i / 3, "b": i / 7, "c": i / 11},
    "3 short strings": lambda i: {"a": f"s{i}", "b": "tent", "c": "guide.md"},
    "3 bools": lambda i: {"a": True, "b": False, "c": i % 2 == 0},
    "list of 8 ints": lambda i: {"a": list(range(i, i + 8))},
    "nested dict, 6 values": lambda i: {
        "m": {"page": i % 300, "line": i, "score": 0.5, "source": "a.md", "lang": "en", "ok": True}
    },
    # The shape of a RAG chunk: its text, where it came from, and its metadata nested.
    "RAG chunk, metadata nested": lambda i: {
        "page_content": TEXT,
        "source": f"docs/guide-{i % 500}.md",
        "content_hash": f"{i:032x}",
        "metadata": {
            "source": f"docs/guide-{i % 500}.md",
            "page": i % 300,
            "start_line": i,
            "end_line": i + 12,
            "headings": ["Guide", "Pitching the tent"],
            "chunk": i % 40,
            "chars": len(TEXT),
            "lang": "en",
        },
    },
}


def packed(shape: Callable[[int], dict]) -> Callable[[int], dict]:
    """The same payload with every nested or non-string value kept as one JSON string."""

    def pack(i: int) -> dict:
        out: dict = {}
        for key, value in shape(i).items():
            out[key] = value if isinstance(value, str) else json.dumps(value)
        return out

    return pack


def best_us(make: Callable[[int], dict], points: int, repeat: int) -> float:
    """The best of `repeat` runs: microseconds to build one Point with this payload (the
    payload dicts are made before the clock starts)."""
    payloads = [make(i) for i in range(points)]
    vector = {"dense": [0.1] * 8}
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for i, payload in enumerate(payloads):
            qe.Point(i + 1, vector, payload)
        best = min(best, time.perf_counter() - start)
    return best / points * 1e6


def round_trip_us(make: Callable[[int], dict], points: int) -> tuple[float, float]:
    """Microseconds a point to upsert them into a shard, and to scroll them back with payload."""
    with tempfile.TemporaryDirectory() as folder:
        config = qe.EdgeConfig(
            vectors={"dense": qe.EdgeVectorParams(size=8, distance=qe.Distance.Cosine)}
        )
        shard = qe.EdgeShard.create(str(Path(folder) / "shard"), config)
        built = [qe.Point(i + 1, {"dense": [0.1] * 8}, make(i)) for i in range(points)]
        start = time.perf_counter()
        for at in range(0, points, 256):
            shard.update(qe.UpdateOperation.upsert_points(built[at : at + 256]))
        upsert = time.perf_counter() - start
        start, offset = time.perf_counter(), None
        while True:
            found, offset = shard.scroll(
                qe.ScrollRequest(offset=offset, limit=1000, with_payload=True, with_vector=False)
            )
            for record in found:
                record.payload  # noqa: B018 - the conversion out is the cost measured
            if offset is None:
                break
        scroll = time.perf_counter() - start
        shard.close()
    return upsert / points * 1e6, scroll / points * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"qdrant-edge-py {metadata.version('qdrant-edge-py')}")
    print(f"{args.points:,} points, best of {args.repeat}; µs a point to build qdrant_edge.Point\n")
    print("| payload | as dicts | as JSON strings | ratio |")
    print("|---|---:|---:|---:|")
    for name, shape in SHAPES.items():
        plain = best_us(shape, args.points, args.repeat)
        flat = best_us(packed(shape), args.points, args.repeat)
        print(f"| {name} | {plain:.1f} | {flat:.1f} | {plain / flat:.2f}× |")
    print("\nThe RAG chunk through a shard (µs a point):\n")
    print("| payload | upsert | scroll with payload |")
    print("|---|---:|---:|")
    for name, shape in (("metadata nested", SHAPES["RAG chunk, metadata nested"]),):
        for label, make in ((name, shape), ("packed as JSON strings", packed(shape))):
            upsert, scroll = round_trip_us(make, args.points)
            print(f"| {label} | {upsert:.1f} | {scroll:.1f} |")


if __name__ == "__main__":
    main()
