"""Keeping a store in sync with its folder: status, sync and watch, measured as a user runs them.

    .venv/bin/python benchmarks/sync.py [--files 2000] [--saves 20] [--out benchmarks/results]
        [--trees 4600 100000] [--estimate-files 600]

It writes a corpus of Markdown files (generated here) into folders, ingests it against the
fake Ollama in another process with an instant embedder (what is left is our own work), and
measures, each command as a process from its start to its exit:

* `archivist sources --store S` with nothing changed: wall time and the CPU the process
  spent (from the child's rusage), beside `archivist --version` (the start-up alone);
* the same after 1% of the files changed (they are hashed; the rest are not);
* `archivist sync --store S` with nothing changed, and after 1% changed;
* `archivist sync --watch`: from a file saved to its new text found by a search (a keyword
  search in this process, made once the watcher says it stored the file), over a series of
  saves a second apart;
* `archivist sync --store S` with nothing changed on trees of `--trees` small files (100,000
  by default: each tree is written and ingested first, which takes minutes);
* the time left the ingest bar shows (`Estimate`), on a real ingest (in this process) of a
  tree of `--estimate-files` Markdown files of mixed sizes (a few hundred bytes to 120 kB)
  against the fake Ollama whose embedding cost grows with the characters, as `perf.py`'s
  does: the estimate when a tenth of the chunks are embedded (and at a quarter and a half)
  against the real end.
"""

import argparse
import json
import math
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path[:0] = [str(HERE), str(ROOT / "tests")]

from perf import (  # noqa: E402
    Config,
    FakeOllamaProcess,
    char_cost_ollama,
    median_runs,
    run_cli,
    user_env,
)

EXE = str(Path(sys.executable).with_name("archivist"))
WORDS = "tent stove boot trail river summit lantern compass rope canyon meadow glacier".split()


def corpus(root: Path, files: int) -> list[Path]:
    paths = []
    for n in range(files):
        path = root / f"part{n % 20:02d}" / f"note{n:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        words = " ".join(WORDS[(n + i) % len(WORDS)] for i in range(60))
        path.write_text(f"# Note {n}\n\n{words}.\n\nFile {n} of the corpus.\n", encoding="utf-8")
        paths.append(path)
    return paths


# Exit status 1 is a partial ingest or sync, as the figures may meet it: measured, not fatal.
MEASURED = (0, 1)


def run(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Run `archivist ARGS` as a process: (wall seconds, CPU seconds of it, stdout)."""
    return run_cli(args, env, MEASURED)


def median_run(args: list[str], env: dict[str, str], runs: int) -> dict[str, float]:
    return median_runs(args, env, runs, MEASURED)


def in_process(url: str, home: Path) -> dict[str, float]:
    """CPU seconds of the status check and of a sync with nothing changed in this process,
    imports done: the work itself, without the process's start-up."""
    from archivist.app import Archivist
    from archivist.ingest.status import store_status
    from archivist.settings import Settings

    app = Archivist(Settings(ollama_host=url, home=home))
    try:
        store = app.store("s")
        store_status(store)  # warm: the store opened, its files in the page cache
        started = time.process_time()
        store_status(store)
        status_cpu = time.process_time() - started
        app.close()
        [(name, root)] = app.recorded_roots(["s"])
        started, wall = time.process_time(), time.perf_counter()
        app.ingest(app.sync_request(name, root), release=True)
        return {
            "status_cpu_s": round(status_cpu, 3),
            "sync_cpu_s": round(time.process_time() - started, 3),
            "sync_wall_s": round(time.perf_counter() - wall, 3),
        }
    finally:
        app.close()


def touch(paths: list[Path], tag: str) -> None:
    for path in paths:
        path.write_text(path.read_text(encoding="utf-8") + f"\nEdited {tag}.\n", encoding="utf-8")


def watch_latency(env: dict[str, str], url: str, home: Path, paths: list[Path], saves: int):
    """Seconds from a save to its new text found by a keyword search, per save."""
    from archivist.app import Archivist
    from archivist.settings import Settings

    watcher = subprocess.Popen(
        [EXE, "sync", "--watch", "--store", "s"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    said: list[str] = []
    threading.Thread(target=lambda: said.extend(watcher.stdout), daemon=True).start()
    latencies = []
    try:
        line = ""
        while "Watching" not in line:
            line = watcher.stderr.readline()
            if not line and watcher.poll() is not None:
                raise SystemExit("sync --watch stopped before watching")
        threading.Thread(target=lambda: [None for _ in watcher.stderr], daemon=True).start()
        app = Archivist(Settings(ollama_host=url, home=home))
        try:
            for n in range(saves):
                token = f"zqx{n:04d}marker"
                path = paths[(n * 37) % len(paths)]
                name = path.relative_to(paths[0].parents[1]).as_posix()
                heard = len(said)
                saved = time.perf_counter()
                path.write_text(path.read_text(encoding="utf-8") + f"\n{token}\n")
                # As a person would: the watcher says it stored the file, then a search finds
                # it (searching the store over and over meanwhile would take turns at the
                # store with the watcher's every write, and measure that instead).
                while not any(name in x for x in said[heard:]):
                    if time.perf_counter() - saved > 60:
                        raise SystemExit(f"save {n} not synced after 60 s")
                    time.sleep(0.01)
                while True:
                    found = app.search(token, "s", k=1, mode="sparse")
                    if found and token in found[0]["text"]:
                        break
                    time.sleep(0.05)
                latencies.append(time.perf_counter() - saved)
                app.close()  # let the watcher write
                time.sleep(1.0)
        finally:
            app.close()
    finally:
        watcher.send_signal(2)
        try:
            watcher.wait(30)
        except subprocess.TimeoutExpired:
            watcher.kill()
    return latencies


def unchanged_tree(files: int, runs: int) -> dict[str, Any]:
    """`sync --store S` with nothing changed on a tree of `files` small files, as a process:
    median wall and CPU seconds (the tree written and ingested first, with an instant
    embedder)."""
    work = Path(tempfile.mkdtemp(prefix="archivist-tree-"))
    try:
        corpus(work / "kb", files)
        with FakeOllamaProcess() as fake:
            env = user_env(OLLAMA_HOST=fake.url, ARCHIVIST_HOME=str(work / "home"))
            wall, cpu, _ = run(["ingest", str(work / "kb"), "--store", "s"], env)
            _, _, out = run(["sync", "--store", "s"], env)  # as measured: nothing to do
            if f"{files:,} unchanged" not in out:
                raise SystemExit(f"sync of an unchanged tree did something: {out}")
            measured = median_run(["sync", "--store", "s"], env, runs)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return {"files": files, "ingest_wall_s": round(wall, 1), **measured, "load": load()}


def mixed_tree(root: Path, files: int, seed: int = 5) -> int:
    """Markdown files of mixed sizes, as a folder of documents has them (mostly notes of a
    few kB, some long guides, a few very large), in no order of size; return their bytes."""
    rng = random.Random(seed)
    total = 0
    for n in range(files):
        size = int(math.exp(rng.uniform(math.log(300), math.log(120_000))))
        words, text = [], 0
        while text < size:
            word = rng.choice(WORDS)
            words.append(word)
            text += len(word) + 1
        body = "\n\n".join(" ".join(words[i : i + 40]) + "." for i in range(0, len(words), 40))
        path = root / f"part{n % 10}" / f"doc{n:04d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# Document {n}\n\n{body}\n", encoding="utf-8")
        total += path.stat().st_size
    return total


def estimate_accuracy(files: int) -> dict[str, Any]:
    """The time left the ingest bar shows against the real end, on an ingest of a mixed-size
    tree against the embedder whose cost grows with the characters (perf.py's)."""
    from archivist.app import Archivist
    from archivist.settings import Settings
    from archivist.terminal.progress import Estimate
    from archivist.tools.progress import Embedded

    config = Config()
    work = Path(tempfile.mkdtemp(prefix="archivist-estimate-"))
    try:
        size = mixed_tree(work / "kb", files)
        with char_cost_ollama(config) as fake:
            estimate = Estimate()
            seen: list[tuple[float, int, float | None]] = []

            def record(event: Any) -> None:
                estimate.add(event)
                if isinstance(event, Embedded):
                    seen.append((time.monotonic(), estimate.embedded, estimate.seconds_left()))

            app = Archivist(Settings(ollama_host=fake.url, home=work / "home"))
            try:
                app.ingest([str(work / "kb")], "mixed", on_progress=record, release=True)
            finally:
                app.close()
            end = time.monotonic()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    total = seen[-1][1]
    started = seen[0][0]
    points = {}
    for share in (0.1, 0.25, 0.5):
        at, _, left = next(row for row in seen if row[1] >= share * total)
        real = end - at
        points[f"{share:.0%}"] = {
            "at_s": round(at - started, 1),
            "shown_left_s": None if left is None else round(left, 1),
            "real_left_s": round(real, 1),
            "error": None if left is None else round((left - real) / real, 3),
        }
    return {
        "files": files,
        "mb": round(size / 1e6, 1),
        "chunks": total,
        "run_s": round(end - started, 1),
        "points": points,
        "load": load(),
    }


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path, default=HERE / "results")
    parser.add_argument(
        "--trees", type=int, nargs="*", default=[4600, 100_000],
        help="sizes (files) of the trees whose unchanged sync is measured; none: skipped",
    )  # fmt: skip
    parser.add_argument(
        "--estimate-files", type=int, default=3000,
        help="files of the mixed-size tree the time left is checked on (0: skipped)",
    )  # fmt: skip
    options = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="archivist-sync-"))
    results: dict[str, Any] = {
        "files": options.files,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
    }
    try:
        paths = corpus(work / "kb", options.files)
        home = work / "home"
        with FakeOllamaProcess() as fake:  # instant embeddings
            env = user_env(OLLAMA_HOST=fake.url, ARCHIVIST_HOME=str(home))
            wall, cpu, _ = run(["ingest", str(work / "kb"), "--store", "s"], env)
            results["ingest"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
            results["version"] = median_run(["--version"], env, options.runs)
            results["sources_unchanged"] = median_run(
                ["sources", "--store", "s", "--json"], env, options.runs
            )
            results["sync_unchanged"] = median_run(["sync", "--store", "s"], env, options.runs)
            results["in_process"] = in_process(fake.url, home)
            changed = paths[:: max(1, len(paths) // (len(paths) // 100 or 1))][: len(paths) // 100]
            touch(changed, "a")
            wall, cpu, out = run(["sources", "--store", "s", "--json"], env)
            statuses = [r["status"] for r in json.loads(out)]
            results["sources_1pct_changed"] = {
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "changed": statuses.count("changed"),
            }
            wall, cpu, _ = run(["sync", "--store", "s"], env)
            results["sync_1pct_changed"] = {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}
            latencies = watch_latency(env, fake.url, home, paths, options.saves)
            results["watch"] = {
                "saves": len(latencies),
                "p50_s": round(statistics.median(latencies), 3),
                "p95_s": round(percentile(latencies, 0.95), 3),
                "max_s": round(max(latencies), 3),
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["load"] = load()
    results["trees"] = [unchanged_tree(files, options.runs) for files in options.trees]
    if options.estimate_files:
        results["estimate"] = estimate_accuracy(options.estimate_files)
    options.out.mkdir(parents=True, exist_ok=True)
    (options.out / "sync.json").write_text(json.dumps(results, indent=2) + "\n")
    table = report(results)
    (options.out / "sync.md").write_text(table)
    print(table)


def report(r: dict[str, Any]) -> str:
    def met(value: float, target: float) -> str:
        return "met" if value <= target else "NOT met"

    s, v, w = r["sources_unchanged"], r["version"], r["watch"]
    rows = [
        f"Store of {r['files']:,} Markdown files in one folder root; instant embedder "
        f"(fake Ollama in another process); {r['machine']['cpus']} CPUs, Python "
        f"{r['machine']['python']}. Each command is a process, start to exit; medians.",
        "",
        "| measure | wall | CPU (child rusage) | target |",
        "|---|---|---|---|",
        f"| `archivist --version` (start-up alone) | {v['wall_s']} s | {v['cpu_s']} s | |",
        f"| `sources --store S`, nothing changed | {s['wall_s']} s | {s['cpu_s']} s | "
        f"≤ 0.5 s CPU: {met(s['cpu_s'], 0.5)} |",
        f"| `sources`, 1% of the files changed ({r['sources_1pct_changed']['changed']} found) | "
        f"{r['sources_1pct_changed']['wall_s']} s | {r['sources_1pct_changed']['cpu_s']} s | |",
        f"| `sync --store S`, nothing changed | {r['sync_unchanged']['wall_s']} s | "
        f"{r['sync_unchanged']['cpu_s']} s | ≤ 1 s wall: {met(r['sync_unchanged']['wall_s'], 1)} |",
        f"| `sync`, 1% changed (embedded again) | {r['sync_1pct_changed']['wall_s']} s | "
        f"{r['sync_1pct_changed']['cpu_s']} s | |",
        f"| first `ingest` of the corpus | {r['ingest']['wall_s']} s | "
        f"{r['ingest']['cpu_s']} s | |",
        f"| in this process, imports done: the status check | | "
        f"{r['in_process']['status_cpu_s']} s | |",
        f"| in this process: `sync` with nothing changed | {r['in_process']['sync_wall_s']} s | "
        f"{r['in_process']['sync_cpu_s']} s | |",
        "",
        f"Load average when measured: {r['load']}.",
        "",
        f"`sync --watch`, from a file saved to its new text found by a search, over "
        f"{w['saves']} saves: p50 {w['p50_s']} s (target ≤ 2 s: {met(w['p50_s'], 2)}), "
        f"p95 {w['p95_s']} s (target ≤ 5 s: {met(w['p95_s'], 5)}), max {w['max_s']} s.",
        "",
    ]
    if r["trees"]:
        rows += [
            "`sync --store S` with nothing changed (nothing read or hashed), a process start "
            "to exit, on trees of small Markdown files; medians:",
            "",
            "| files | wall | CPU (child rusage) | target | load |",
            "|---|---|---|---|---|",
        ]
        for t in r["trees"]:
            target = 0.3 if t["files"] <= 5000 else 2.0
            rows.append(
                f"| {t['files']:,} | {t['wall_s']} s | {t['cpu_s']} s | ≤ {target} s wall: "
                f"{met(t['wall_s'], target)} | {t['load']} |"
            )
        rows.append("")
    if "estimate" in r:
        e = r["estimate"]
        rows += [
            f"The time left the ingest bar shows, on an ingest of {e['files']} Markdown files "
            f"of mixed sizes ({e['mb']} MB, {e['chunks']:,} chunks, {e['run_s']} s) against an "
            f"embedder whose cost grows with the characters (load {e['load']}):",
            "",
            "| chunks embedded | after | shown left | real left | error | target |",
            "|---|---|---|---|---|---|",
        ]
        for share, p in e["points"].items():
            shown = "not yet" if p["shown_left_s"] is None else f"{p['shown_left_s']} s"
            error = "" if p["error"] is None else f"{p['error']:+.0%}"
            target = ""
            if share == "10%":
                ok = p["error"] is not None and abs(p["error"]) <= 0.25
                target = f"within 25 %: {'met' if ok else 'NOT met'}"
            rows.append(
                f"| {share} | {p['at_s']} s | {shown} | {p['real_left_s']} s | {error} | {target} |"
            )
        rows.append("")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
