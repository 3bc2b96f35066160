"""How the embedded store grows: stores of 10,000 and 100,000 chunks (1,000,000 with
`--million`), each laid out in memory and on disk, measured as a user meets them.

    .venv/bin/python benchmarks/scale.py [--sizes 10000 100000] [--million] [--queries 1000]
        [--layouts auto disk memory] [--runs 5] [--keep DIR] [--plot PNG] [--from JSON…]
        [--from JSON… --again SIZE=HOME…]

For each size it writes a corpus of Markdown files, every other one Chinese, chunked at
`--chunk-size 600` (English chunks of ~500 characters, Chinese ones of ~250), its words drawn
as text is written (`Vocabulary.open`: Zipf's law over tens of thousands of words, the shop's
words a query asks for among them at a topic's rate), and ingests it
with `archivist ingest` as a process against the fake Ollama answering at once (hashed
768-d unit vectors), once per layout (ARCHIVIST_STORE_LAYOUT): `memory`, the vectors in
memory as stores were laid out before, and the layout the size gets by default (`auto`: on
disk with a 2-bit copy, mapped, once the store is indexed) or, for a store too small for
that, `disk` forced. Each run reports:

* the ingest's wall time, CPU and peak RSS (the kernel's rusage of the process and the
  children it waited for: its helper, its index builds);
* the store's size on disk (blocks allocated);
* `archivist search`, `archivist sources` and `archivist stores` as processes, start to exit:
  median wall, CPU and peak RSS of 5 runs, and a search with nothing of the store in the
  page cache (`search_cold`, as after a reboot: the median of as many runs, the store's
  files dropped from the cache before each);
* dense search in process, p50/p95 over `--queries` queries (stored chunks' vectors with
  noise), and hit@10: how many of the exact 10 nearest (every stored vector scored, the
  quantized copy ignored) the store's own search (its index and, on disk, the 2-bit copy
  rescored) returns; "(ties)" also counts a point scoring within TIE of the exact 10th;
* a warm MCP server (`archivist mcp` over stdio, the official SDK's client): p50/p95 of
  SERVER_CALLS hybrid searches (fewer if `--queries` is fewer) after its first, and its
  memory after them.

A table goes to stdout and JSON to benchmarks/results/scale.json; `--plot PNG` draws the
growth (log-log) from the results, and `--from JSON…` makes the table and the plot from
results files without measuring. With `--keep DIR` the homes are made in DIR and kept
(`DIR/home-SIZE-LAYOUT`, its store `scale`), to measure a command again on them
(`ARCHIVIST_HOME=… archivist search … --store scale`) without another ingest, or all of
them with `--from JSON --again SIZE=HOME` (that size's row of the file measured again on
the kept home, the results written to `--out`). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from perf import (  # noqa: E402
    FakeOllamaProcess,
    Vocabulary,
    command_line,
    make_corpus,
    process_table,
    run_process,
    user_env,
)

STORE = "scale"
CHUNK_SIZE = 600
FILE_CHARS = 4000
# Chunks a corpus file makes at CHUNK_SIZE, every other file Chinese (measured on this corpus:
# 11,834 chunks from 746 files); the corpus of a size is written with SIZE / this many files.
CHUNKS_PER_FILE = 15.9
RUNS = 5
# Searches asked of the warm server, after its first.
SERVER_CALLS = 200
# Scores this close count as tied for hit@10 "(ties)": the store's exact search scores its
# float16 vectors, and its top 10 differs from a float32 scan of the same vectors by points
# this close to the 10th (measured at 99,910 chunks: 0.992 of the same points, every other
# within 1e-4), so nearer than that no search can be said to miss.
TIE = 1e-4


def run(args: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Run `archivist ARGS` as a process; its wall and CPU seconds and peak RSS (MB) from the
    kernel's rusage of it and the children it waited for, and its stdout."""
    wall, usage, out = run_process(args, env)
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "peak_rss_mb": usage.ru_maxrss / 1024,
        "stdout": out,
    }


def median_run(
    args: list[str], env: dict[str, str], runs: int, before: Callable[[], None] | None = None
) -> dict[str, float]:
    """The median wall, CPU and peak RSS of `runs` runs of `archivist ARGS`, each after
    `before()` if given."""
    found = []
    for _ in range(runs):
        if before is not None:
            before()
        found.append(run(args, env))
    return {
        key: round(statistics.median(f[key] for f in found), 3)
        for key in ("wall_s", "cpu_s", "peak_rss_mb")
    }


def drop_cached(folder: Path) -> None:
    """Have the kernel drop a folder's files from the page cache (written back first), so the
    next command reads every page it visits from disk, as after a reboot."""
    os.sync()
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def disk_mb(folder: Path) -> float:
    """Blocks allocated under `folder` (Edge's files are sparse: larger than they hold)."""
    used = sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())
    return round(used / 2**20, 1)


def _memory_of(pid: int | str) -> dict[str, float]:
    """A process's resident memory (MB) now and at its peak, its own and its mapped files',
    from /proc (`pid` "self": this process's)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) / 1024
    return found


def _resident_mb() -> dict[str, float]:
    """This process's resident memory (MB): its own (anonymous: heap, the int8 copy) and
    that of mapped files (the store's files, page cache the kernel can take back)."""
    memory = _memory_of("self")
    return {"anon": memory["RssAnon"], "file": memory["RssFile"]}


def dense_search(home: Path, queries: int) -> dict[str, Any]:
    """Dense search in this process: latency of the store's own search, and its hit@10
    against exact search, on stored vectors with noise added; the memory the open store
    holds, before and after the searches."""
    import numpy as np

    from archivist.tools import points
    from archivist.tools.edge import EdgeClient
    from archivist.tools.store import DENSE, dense_params

    client = EdgeClient(home / "edge")
    try:
        sample, _ = client.scroll(STORE, limit=queries, with_payload=False, with_vectors=[DENSE])
        rng = np.random.default_rng(1)
        stored = np.array([p.vector[DENSE] for p in sample], dtype=np.float32)
        noisy = stored + rng.standard_normal(stored.shape).astype(np.float32) * 0.03
        noisy /= np.linalg.norm(noisy, axis=1, keepdims=True)
        client.close()
        before = _resident_mb()
        client = EdgeClient(home / "edge")
        started = time.perf_counter()
        client.count(STORE, count_filter=points.Filter(must=[]))  # opens the shard
        open_s = time.perf_counter() - started
        opened = _resident_mb()

        def search(query: list[float], params: Any) -> list[Any]:
            request = points.QueryRequest(query=query, using=DENSE, limit=10, params=params)
            return client.query_batch_points(STORE, requests=[request])[0].points

        # Every vector scored, on the vectors themselves (not the int8 copy).
        exact_params = points.SearchParams(
            exact=True, quantization=points.QuantizationSearchParams(ignore=True)
        )
        hits, tied, times, exact_times = [], [], [], []
        for query in noisy.tolist():
            started = time.perf_counter()
            found = search(query, dense_params(points))
            times.append(time.perf_counter() - started)
            started = time.perf_counter()
            exact = search(query, exact_params)
            exact_times.append(time.perf_counter() - started)
            hits.append(len({p.id for p in found} & {p.id for p in exact}) / max(1, len(exact)))
            # A point scoring within TIE of the exact 10th is as near as the store can tell.
            cut = exact[-1].score - TIE if exact else 0.0
            tied.append(min(len(exact), sum(p.score >= cut for p in found)) / max(1, len(exact)))
        searched = _resident_mb()
        return {
            "queries": len(hits),
            "hit_at_10": round(statistics.fmean(hits), 4),
            "hit_at_10_ties": round(statistics.fmean(tied), 4),
            "p50_ms": round(1000 * statistics.median(times), 2),
            "p95_ms": round(1000 * statistics.quantiles(times, n=20)[-1], 2),
            "exact_p50_ms": round(1000 * statistics.median(exact_times), 2),
            "open_s": round(open_s, 3),
            "open_mb": {k: round(opened[k] - before[k], 1) for k in opened},
            "searched_mb": {k: round(searched[k] - before[k], 1) for k in searched},
        }
    finally:
        client.close()


def dense_child(home: Path, queries: int) -> dict[str, Any]:
    """`dense_search` in a child process. This one stays small: a process it starts counts
    its parent's memory at the start in its peak RSS (Linux keeps the high-water mark of the
    memory replaced by `exec`), so the commands' figures would include a store opened here."""
    done = subprocess.run(
        [sys.executable, __file__, "--dense-child", str(home), str(queries)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


# What the warm server is asked: questions of the corpus's kind, English and Chinese in turn.
SERVER_QUERIES = [
    "how many days for a refund of the tent",
    "帐篷退货需要几天",
    "which sleeping bag keeps warm below freezing",
    "露营炉的燃料怎么选",
    "can I return boots after wearing them outside",
    "背包的保修期是多久",
]


def _server_pid() -> int | None:
    """The `archivist mcp` process this one started (the SDK's stdio client spawns it)."""
    me = os.getpid()
    for pid, (parent, _) in process_table().items():
        if parent == me and b"mcp" in command_line(pid):
            return pid
    return None


def warm_server(home: Path, url: str, calls: int) -> dict[str, Any]:
    """`archivist mcp --store scale` over stdio, through the official SDK's client: after a
    first call (the store opened, the query's model warmed), `calls` searches (hybrid, as the
    agent's tool runs them: the fake embedder answers at once, no chat model), each timed
    from the client's request to its answer; the server's memory from /proc after them."""
    import anyio
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    env = user_env(ARCHIVIST_HOME=str(home), OLLAMA_HOST=url)
    env.pop("QDRANT_URL", None)
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "archivist", "mcp", "--store", STORE], env=env
    )

    async def session() -> dict[str, Any]:
        async with Client(stdio_client(params, errlog=subprocess.DEVNULL)) as client:
            tool = f"search_{STORE}"
            first = time.perf_counter()
            answer = await client.call_tool(tool, {"query": SERVER_QUERIES[0]})
            first_s = time.perf_counter() - first
            if answer.is_error:
                raise RuntimeError(answer.content[0].text)
            times = []
            for n in range(calls):
                started = time.perf_counter()
                await client.call_tool(tool, {"query": SERVER_QUERIES[n % len(SERVER_QUERIES)]})
                times.append(time.perf_counter() - started)
            pid = _server_pid()
            return {
                "calls": calls,
                "first_ms": round(1000 * first_s, 1),
                "p50_ms": round(1000 * statistics.median(times), 1),
                "p95_ms": round(1000 * statistics.quantiles(times, n=20)[-1], 1),
                "memory_mb": {k: round(v, 1) for k, v in _memory_of(pid).items()} if pid else {},
            }

    return anyio.run(session)


def server_child(home: Path, url: str, calls: int) -> dict[str, Any]:
    """`warm_server` in a child process (the SDK's imports stay out of this one)."""
    done = subprocess.run(
        [sys.executable, __file__, "--server-child", str(home), url, str(calls)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def layout_of(home: Path) -> dict[str, Any]:
    """What the store's files say of its layout: on disk or not, and its segments."""
    folder = home / "edge" / STORE
    settings = json.loads((folder / "collection.json").read_text(encoding="utf-8"))
    segments = []
    for file in (folder / "shard" / "segments").glob("*/segment.json"):
        dense = json.loads(file.read_text())["config"]["vector_data"]["dense"]
        segments.append(
            {
                "index": dense["index"]["type"],
                "m": dense["index"].get("options", {}).get("m"),
                "quantized": bool(dense.get("quantization_config")),
                "storage": dense["storage_type"],
            }
        )
    return {"vectors_on_disk": bool(settings.get("vectors_on_disk")), "segments": segments}


def measure(
    size: int,
    layout: str,
    corpus: Path,
    work: Path,
    url: str,
    queries: int,
    runs: int,
    keep: bool = False,
) -> dict:
    home = work / f"home-{size}-{layout}"
    shutil.rmtree(home, ignore_errors=True)
    env = user_env(ARCHIVIST_HOME=str(home), OLLAMA_HOST=url, ARCHIVIST_STORE_LAYOUT=layout)
    env.pop("QDRANT_URL", None)
    print(f"  ingest {size:,} chunks, layout {layout}…", file=sys.stderr, flush=True)
    ingest = run(
        ["ingest", str(corpus), "--store", STORE, "--chunk-size", str(CHUNK_SIZE), "--json"], env
    )
    report = json.loads(ingest["stdout"])
    found: dict[str, Any] = {
        "size": size,
        "layout": layout,
        "chunks": report["points"],
        "files": report["files"],
        "ingest": {k: round(ingest[k], 2) for k in ("wall_s", "cpu_s", "peak_rss_mb")},
        "disk_mb": disk_mb(home / "edge" / STORE),
        "store": layout_of(home),
    }
    found.update(commands(home, env, runs))
    found["dense"] = dense_child(home, queries)
    found["server"] = server_child(home, url, min(SERVER_CALLS, queries))
    if keep:
        print(f"  kept: ARCHIVIST_HOME={home} (store '{STORE}')", file=sys.stderr, flush=True)
    else:
        shutil.rmtree(home, ignore_errors=True)
    return found


def table(results: list[dict[str, Any]]) -> str:
    head = (
        "| chunks | layout | ingest wall / CPU / peak RSS | disk | search wall / CPU / peak RSS "
        "| sources | stores | store open: s, own / files MB | after 1,000 searches: own / "
        "files MB | dense p50 / p95 (exact p50) | hit@10 (ties) | warm MCP server p50 / p95, "
        "RSS |\n|" + "---|" * 12
    )
    rows = [head]
    for r in results:
        i, s, d = r["ingest"], r["search"], r["dense"]
        w = r.get("server")  # results from before it was measured have none
        served = (
            f"{w['p50_ms']:.0f} / {w['p95_ms']:.0f} ms, {w['memory_mb'].get('VmRSS', 0):.0f} MB"
            if w
            else "–"
        )
        opened, searched = d["open_mb"], d["searched_mb"]
        rows.append(
            f"| {r['chunks']:,} | {r['layout']} | {i['wall_s']:.1f} s / {i['cpu_s']:.1f} s / "
            f"{i['peak_rss_mb']:.0f} MB | {r['disk_mb']:.0f} MB | {s['wall_s']:.2f} s / "
            f"{s['cpu_s']:.2f} s / {s['peak_rss_mb']:.0f} MB | {r['sources']['wall_s']:.2f} s "
            f"/ {r['sources']['peak_rss_mb']:.0f} MB | {r['stores']['wall_s']:.2f} s / "
            f"{r['stores']['peak_rss_mb']:.0f} MB | {d['open_s']:.2f} s, {opened['anon']:.0f} / "
            f"{opened['file']:.0f} | {searched['anon']:.0f} / {searched['file']:.0f} | "
            f"{d['p50_ms']:.1f} / {d['p95_ms']:.1f} ms ({d['exact_p50_ms']:.1f}) | "
            f"{d['hit_at_10']:.3f} ({d['hit_at_10_ties']:.3f}) | {served} |"
        )
    return "\n".join(rows)


# What the growth plot draws, each against the store's chunks: (label, how it is read).
PLOTTED = [
    ("ingest wall (s)", lambda r: r["ingest"]["wall_s"]),
    ("ingest peak RSS (MB)", lambda r: r["ingest"]["peak_rss_mb"]),
    ("on disk (MB)", lambda r: r["disk_mb"]),
    ("`search` process wall (s)", lambda r: r["search"]["wall_s"]),
    ("`search` wall, nothing cached (s)", lambda r: r.get("search_cold", {}).get("wall_s")),
    ("`search` peak RSS (MB)", lambda r: r["search"]["peak_rss_mb"]),
    ("`stores` peak RSS (MB)", lambda r: r["stores"]["peak_rss_mb"]),
    ("warm server p50 (ms)", lambda r: r.get("server", {}).get("p50_ms")),
    ("dense search p50 (ms)", lambda r: r["dense"]["p50_ms"]),
]


def plot(results: list[dict[str, Any]], out: Path) -> None:
    """Draw how each figure grows with the store (log-log, one line each, the default
    layout's runs: `auto`, or `disk` where a size was forced on disk) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted(
        (r for r in results if r["layout"] != "memory" or r["size"] < 40_000),
        key=lambda r: r["chunks"],
    )
    rows = list({r["size"]: r for r in rows if r["layout"] != "disk"}.values()) or rows
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=80)
    for label, read in PLOTTED:
        points = [(r["chunks"], read(r)) for r in rows if read(r)]
        if points:
            axes.plot(*zip(*points, strict=True), marker="o", label=label)
    chunks = [r["chunks"] for r in rows]
    axes.plot(chunks, [c / chunks[0] for c in chunks], "k:", label="linear (×1 per ×1)")
    axes.set(xscale="log", yscale="log", xlabel="chunks in the store")
    axes.set_title("How the embedded store grows (2 shared cores)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    print(f"plot: {out}", file=sys.stderr)


def commands(home: Path, env: dict[str, str], runs: int) -> dict[str, Any]:
    """`search` (cold, then cached; English, then Chinese), `sources` and `stores` as
    processes on the store kept in `home`."""
    found: dict[str, Any] = {}
    query = ["search", "how many days for a refund of the tent", "--store", STORE]
    # A search with nothing of the store in the page cache (after a reboot; after an ingest
    # its last index builds may have left pages cached): every page it visits read from
    # disk, the median of `runs`, each after the store's files are dropped. The later runs
    # find the pages the earlier ones left cached, as a user's next search does.
    found["search_cold"] = median_run(query, env, runs, lambda: drop_cached(home / "edge"))
    found["search"] = median_run(query, env, runs)
    found["search_zh"] = median_run(["search", "帐篷退货需要几天", "--store", STORE], env, runs)
    found["sources"] = median_run(["sources", "--store", STORE], env, runs)
    found["stores"] = median_run(["stores"], env, runs)
    return found


def commands_again(sources: list[Path], homes: list[str], runs: int, out: Path) -> None:
    """The commands measured again on kept homes (`SIZE=HOME`), their rows of the results
    files replaced, the whole written to `out`."""
    documents = [json.loads(f.read_text()) for f in sources]
    document = documents[0]
    document["results"] = [r for d in documents for r in d["results"]]
    kept = {int(size): Path(home) for size, _, home in (h.partition("=") for h in homes)}
    with FakeOllamaProcess() as fake:
        for row in document["results"]:
            home = kept.get(row["size"])
            if home is not None:
                env = user_env(
                    ARCHIVIST_HOME=str(home),
                    OLLAMA_HOST=fake.url,
                    ARCHIVIST_STORE_LAYOUT=row["layout"],
                )
                env.pop("QDRANT_URL", None)
                row.update(commands(home, env, runs))
                load = [round(x, 2) for x in os.getloadavg()]
                document["machine"][f"load_commands_again_{row['size']}"] = load
                print(table([row]).splitlines()[-1], f"(load {load})", file=sys.stderr, flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(table(document["results"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--million", action="store_true", help="also 1,000,000 chunks")
    parser.add_argument("--layouts", nargs="+", help="only these layouts (default: both)")
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=RUNS, help="runs of each command")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scale.json")
    parser.add_argument(
        "--keep", type=Path, metavar="DIR", help="make the homes in DIR and keep them"
    )
    parser.add_argument("--dense-child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--server-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--plot", type=Path, metavar="PNG", help="draw the growth plot here")
    parser.add_argument(
        "--from",
        dest="sources",
        type=Path,
        nargs="+",
        metavar="JSON",
        help="no measuring: the table and --plot from these results files",
    )
    parser.add_argument(
        "--again",
        nargs="+",
        metavar="SIZE=HOME",
        help="with --from: measure the commands again on kept homes (--keep), to --out",
    )
    args = parser.parse_args()
    if args.again:
        commands_again(args.sources, args.again, args.runs, args.out)
        if args.plot:
            plot(json.loads(args.out.read_text())["results"], args.plot)
        return
    if args.sources:
        found = [r for f in args.sources for r in json.loads(f.read_text())["results"]]
        print(table(found))
        if args.plot:
            plot(found, args.plot)
        return
    if args.dense_child:
        print(json.dumps(dense_search(Path(args.dense_child[0]), int(args.dense_child[1]))))
        return
    if args.server_child:
        home, url, calls = args.server_child
        print(json.dumps(warm_server(Path(home), url, int(calls))))
        return
    sizes = args.sizes + ([1_000_000] if args.million else [])
    keep = args.keep is not None
    results = []
    with tempfile.TemporaryDirectory(prefix="archivist-scale-") as tmp:
        work = Path(tmp)
        if args.keep:
            work = args.keep.resolve()
            work.mkdir(parents=True, exist_ok=True)
        with FakeOllamaProcess() as fake:  # instant: what is measured is Archivist's own work
            for size in sizes:
                files = max(1, round(size / CHUNKS_PER_FILE))
                corpus = make_corpus(
                    work / f"corpus-{size}", files, FILE_CHARS, 17, 2, Vocabulary.open()
                )
                # Below the index threshold `auto` keeps the store in memory: forced on disk.
                layouts = args.layouts or ["memory", "auto" if size >= 40_000 else "disk"]
                for layout in layouts:
                    found = measure(
                        size, layout, corpus, work, fake.url, args.queries, args.runs, keep
                    )
                    results.append(found)
                    print(table(results[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                shutil.rmtree(corpus)
    load = os.getloadavg()
    document = {
        "machine": {
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "load_after": [round(x, 2) for x in load],
        },
        "chunk_size": CHUNK_SIZE,
        "vocabulary": "open",
        "benchmark_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n")
    print(table(results))
    if args.plot:
        plot(results, args.plot)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"\nload average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; own: {own} MB")


if __name__ == "__main__":
    main()
