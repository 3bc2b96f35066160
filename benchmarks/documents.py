"""The list and read tools as a user runs them, and what they change in an evaluation.

    .venv/bin/python benchmarks/documents.py [--quick] [--out benchmarks/results]

Measures, each command a process from start to exit (CPU from the kernel's rusage):

* `archivist sources --store S --contains TEXT` on a store of 24,000 chunks (3,000 generated
  Markdown documents, split and stored as an ingest stores them; random vectors, since
  listing reads no vector): every match with its exact count. Target: at most 0.5 s of CPU.
* `archivist read --store S doc.pdf --page N` on a 300-page PDF (generated, 40 lines a page,
  ingested through the fake Ollama), and the whole PDF read page by page in one process.
  Target: at most 0.3 s of CPU a page.
* `archivist eval evals/documents.jsonl` over the shipped examples (`examples/shop` and
  `examples/hr` in one store), every fake model with `--tools search` and `--tools all`.

Needs the `dev` extra (the fake Ollama, pypdf to ingest the PDF).
"""

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the fake Ollama, the PDF writer
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

from perf import run_cli, user_env  # noqa: E402

WORDS = (
    "tent boot refund parcel warranty river trail jacket order invoice stove rope lamp "
    "season summit valley ranger weather canvas zipper seam buckle harness compass"
).split()


def _document(rng: random.Random, n: int) -> str:
    lines = [f"# Field guide {n}", ""]
    for section in range(6):
        lines += [f"## Part {section} {rng.choice(WORDS)}", ""]
        for _ in range(rng.randint(3, 6)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(12, 24))]
            words[0] = words[0].capitalize()
            if rng.random() < 0.05:
                words.insert(3, "getPopupContainer")
            lines.append(" ".join(words) + ".")
        lines.append("")
    return "\n".join(lines)


def large_store(home: Path, chunks: int, seed: int = 5) -> dict[str, Any]:
    """Fill store `big` with generated documents split as an ingest splits them, until it
    holds `chunks` chunks; return its size and the documents' text (for the check)."""
    import numpy as np

    from archivist.ingest.loaders.base import Section
    from archivist.ingest.splitter import SplitterSettings
    from archivist.ingest.sync import chunk_sections
    from archivist.tools.store import ChunkWrite, KnowledgeStore, connect

    rng, vectors = random.Random(seed), np.random.default_rng(seed)
    client = connect(home / "edge")
    store = KnowledgeStore(client, "big")
    store.ensure(
        {
            "embed_model": "nomic-embed-text",
            "dimension": 768,
            "document_prefix": "",
            "query_prefix": "",
        }
    )
    stored, texts, n = 0, {}, 0
    splitter = SplitterSettings().resized(300, 60)
    while stored < chunks:
        batch = []
        while len(batch) < 1000 and stored + len(batch) < chunks:
            text = _document(rng, n)
            source = f"guides/{n // 100:02d}/guide-{n:05d}.md"
            texts[source] = text
            made = chunk_sections(source, [Section(text, first_line=1)], splitter)
            batch += [(c, f"h{n}", len(made)) for c in made]
            n += 1
        unit = vectors.standard_normal((len(batch), 768), dtype=np.float32)
        unit /= np.linalg.norm(unit, axis=1, keepdims=True)
        store.upsert(
            [ChunkWrite(c, v, h, k) for (c, h, k), v in zip(batch, unit.tolist(), strict=True)]
        )
        stored += len(batch)
    count = store.count()
    client.close()
    return {"chunks": count, "documents": n, "texts": texts}


def list_contains(work: Path, chunks: int, runs: int) -> dict[str, Any]:
    home = work / "list-home"
    started = time.perf_counter()
    built = large_store(home, chunks)
    texts = built.pop("texts")
    built["build_s"] = round(time.perf_counter() - started, 1)
    env = user_env(ARCHIVIST_HOME=str(home))
    needle = re.compile("getpopupcontainer", re.IGNORECASE)
    expected = {s: n for s, t in texts.items() if (n := len(needle.findall(t)))}
    samples = []
    for _ in range(runs):
        args = ["sources", "--store", "big", "--contains", "getPopupContainer", "--json"]
        wall, cpu, out = run_cli(args, env)
        samples.append((wall, cpu))
        found = {e["source"]: e["count"] for e in json.loads(out)}
        assert found == expected, "the listing must equal a scan of the documents"
    walls, cpus = sorted(w for w, _ in samples), sorted(c for _, c in samples)
    return {
        **built,
        "matching_sources": len(expected),
        "occurrences": sum(expected.values()),
        "wall_s": round(walls[len(walls) // 2], 3),
        "cpu_s": round(cpus[len(cpus) // 2], 3),
        "target_cpu_s": 0.5,
    }


def read_pdf(work: Path, pages: int, runs: int) -> dict[str, Any]:
    from fake_ollama import FakeOllama
    from samples import make_pdf

    rng = random.Random(7)
    corpus = work / "pdf"
    corpus.mkdir(parents=True, exist_ok=True)
    content = [
        [f"Chapter {p} of the manual, on {rng.choice(WORDS)} and {rng.choice(WORDS)}."]
        + [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(40)]
        for p in range(1, pages + 1)
    ]
    (corpus / "manual.pdf").write_bytes(make_pdf(content, title="Manual"))
    home = work / "pdf-home"
    with FakeOllama() as fake:
        env = user_env(ARCHIVIST_HOME=str(home), OLLAMA_HOST=fake.url)
        run_cli(["ingest", str(corpus), "--store", "pdf"], env)
        per_page = []
        for page in (1, pages // 2, pages):
            for _ in range(runs):
                wall, cpu, out = run_cli(
                    ["read", "--store", "pdf", "manual.pdf", "--page", str(page), "--json"], env
                )
                lines = json.loads(out)["lines"]
                assert {line["page"] for line in lines} == {page}
                per_page.append((wall, cpu))
        script = (
            "import sys, time, resource\n"
            "from archivist.app import Archivist\nfrom archivist.settings import load_settings\n"
            "app = Archivist(load_settings())\n"
            f"for page in range(1, {pages} + 1):\n"
            "    app.read_document('pdf', 'manual.pdf', page=str(page))\n"
            "app.close()\n"
        )
        started = time.perf_counter()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert done.returncode == 0, done.stderr.decode()[-2000:]
        whole_wall = time.perf_counter() - started
        whole_cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    cpus = sorted(c for _, c in per_page)
    walls = sorted(w for w, _ in per_page)
    return {
        "pages": pages,
        "read_one_page_wall_s": round(walls[len(walls) // 2], 3),
        "read_one_page_cpu_s": round(cpus[len(cpus) // 2], 3),
        "read_every_page_wall_s": round(whole_wall, 2),
        "read_every_page_cpu_s": round(whole_cpu, 2),
        "read_every_page_cpu_ms_a_page": round(whole_cpu / pages * 1000, 1),
        "target_cpu_s_a_page": 0.3,
    }


def eval_toolsets(work: Path) -> dict[str, Any]:
    from fake_ollama import CONFUSED_MODEL, SMALL_MODELS, FakeOllama

    home = work / "eval-home"
    chosen = [
        "qwen2.5:3b",
        "small-json:1b",
        "small-wrongname:1b",
        "small-confused:1b",
        "gemma-notools:1b",
    ]
    with FakeOllama() as fake:
        for spec in [*SMALL_MODELS, CONFUSED_MODEL]:
            fake.add_model(spec)
        env = user_env(ARCHIVIST_HOME=str(home), OLLAMA_HOST=fake.url)
        shipped = [str(ROOT / "examples" / "shop"), str(ROOT / "examples" / "hr")]
        run_cli(["ingest", *shipped, "--store", "examples"], env)
        args = [
            "eval",
            str(ROOT / "evals" / "documents.jsonl"),
            "--store",
            "examples",
            "--tools",
            "search",
            "--tools",
            "all",
            "--out",
            str(work / "eval"),
            "--json",
        ]
        for model in chosen:
            args += ["--model", model]
        wall, cpu, out = run_cli(args, env)
    report = json.loads(out)
    keys = (
        "tool_selection_accuracy",
        "argument_validity",
        "source_set_precision",
        "source_set_recall",
        "count_exact_rate",
        "document_read_rate",
        "read_around_rate",
        "retrieval_hit@k",
        "answer_contains_rate",
        "model_calls",
        "input_tokens",
    )
    return {
        "wall_s": round(wall, 1),
        "models": {s["label"]: {k: s["metrics"].get(k) for k in keys} for s in report["models"]},
    }


def markdown(results: dict[str, Any]) -> str:
    lc, rp = results["list_contains"], results["read_pdf"]
    out = [
        "# The list and read tools",
        "",
        f"Measured {results['when']} on {results['machine']} (other work running).",
        "",
        "| command | measured | target |",
        "|---|---|---|",
        f"| `sources --contains` on {lc['chunks']:,} chunks ({lc['documents']:,} documents, "
        f"{lc['matching_sources']} match, {lc['occurrences']} times) | {lc['cpu_s']} s CPU, "
        f"{lc['wall_s']} s wall | ≤ {lc['target_cpu_s']} s CPU |",
        f"| `read --page N` of a {rp['pages']}-page PDF | {rp['read_one_page_cpu_s']} s CPU, "
        f"{rp['read_one_page_wall_s']} s wall | ≤ {rp['target_cpu_s_a_page']} s CPU a page |",
        f"| every page of it read in one process | {rp['read_every_page_cpu_ms_a_page']} ms "
        f"CPU a page ({rp['read_every_page_cpu_s']} s CPU, {rp['read_every_page_wall_s']} s "
        "wall in all) | |",
        "",
        "## `archivist eval evals/documents.jsonl --tools search --tools all` (fake models)",
        "",
    ]
    models = results["eval"]["models"]
    keys = list(next(iter(models.values())))
    out.append("| metric | " + " | ".join(models) + " |")
    out.append("|---|" + "---|" * len(models))
    for key in keys:
        cells = []
        for figures in models.values():
            value = figures[key]
            cells.append(
                "–"
                if value is None
                else f"{value:.2f}"
                if isinstance(value, float)
                else f"{value:,}"
            )
        out.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="A smaller store and PDF.")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args()
    chunks, pages, runs = (4_000, 60, 1) if args.quick else (24_000, 300, 3)
    import platform

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        results = {
            "when": time.strftime("%Y-%m-%d"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "list_contains": list_contains(work, chunks, runs),
            "read_pdf": read_pdf(work, pages, runs),
            "eval": eval_toolsets(work),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    name = "documents-quick" if args.quick else "documents"
    (args.out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    text = markdown(results)
    (args.out / f"{name}.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
