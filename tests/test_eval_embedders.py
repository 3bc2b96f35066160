"""`archivist eval … --embed-model A --embed-model B`: embedding models compared on retrieval.

The fake's embedders hash words into vectors (nomic-embed-text: 768 dimensions, all-minilm:
384), so a question finds the passages sharing its words; llama3.2:1b is a chat model whose
vectors are nearly constant, so its dense search ranks passages at random.
"""

import json
from pathlib import Path

import pytest
from conftest import run_cli
from fake_ollama import CHAT_EMBEDDER, FakeOllama

from archivist.app import Archivist
from archivist.evaluation.run import load_dataset, source_matches
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError
from archivist.tools.store import KnowledgeStore, indexed_text

EMBEDDERS = ["nomic-embed-text", "all-minilm", "llama3.2:1b"]


@pytest.fixture
def served(ollama: FakeOllama) -> FakeOllama:
    ollama.add_model(CHAT_EMBEDDER)
    return ollama


def compare(ollama: FakeOllama, home: Path, dataset: Path, out: Path, *more: str):
    flags = [f for model in EMBEDDERS for f in ("--embed-model", model)]
    return run_cli(
        "eval", str(dataset), "--store", "shop_docs", *flags, "--out", str(out), "--json", *more,
        ollama_url=ollama.url, home=home,
    )  # fmt: skip


def expected_figures(settings: Settings, dataset: Path, store: str) -> dict:
    """hit@5 and MRR@5 per mode, from searching the store directly with each question (its
    queries are embedded by the model that built it)."""
    app = Archivist(settings)
    try:
        figures = {}
        cases = [c for c in load_dataset(dataset) if c.expect_sources]
        for mode in ("dense", "hybrid", "sparse"):
            ranks = []
            for case in cases:
                results = app.search(case.question, store, 5, mode)
                ranks.append(
                    next(
                        (
                            r["rank"]
                            for r in results
                            if any(source_matches(r["source"], e) for e in case.expect_sources)
                        ),
                        None,
                    )
                )
            found = [r for r in ranks if r is not None]
            figures[mode] = {
                "hit@k": len(found) / len(ranks),
                "mrr@k": sum(1 / r for r in found) / len(ranks),
                "cases": len(ranks),
            }
        return figures
    finally:
        app.close()


def test_each_embedder_gets_a_store_of_the_same_chunks_and_exact_retrieval_figures(
    served, home, store, settings, tmp_path
):
    dataset = tmp_path / "shop.jsonl"
    made = run_cli(
        "eval", "generate", "--store", "shop_docs", "-n", "20", "--out", str(dataset),
        ollama_url=served.url, home=home,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    served.clear_requests()

    done = compare(served, home, dataset, tmp_path / "report")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["models"] == [] and report["runs"] == []  # no chat model was asked for
    embedders = {e["embed_model"]: e for e in report["embedders"]}
    assert [e["store"] for e in report["embedders"]] == [
        "shop_docs",  # built with nomic-embed-text already: used as it is
        "shop_docs__all_minilm",
        "shop_docs__llama3_2_1b",
    ]
    assert [e["reused"] for e in report["embedders"]] == [True, False, False]
    assert [e["dimension"] for e in report["embedders"]] == [768, 384, 256]
    assert [e["chat_model"] for e in report["embedders"]] == [False, False, True]
    assert embedders["llama3.2:1b"]["label"] == "llama3.2:1b (chat model)"
    assert embedders["nomic-embed-text"]["ingest_s"] is None
    assert embedders["all-minilm"]["ingest_s"] > 0 and embedders["all-minilm"]["disk_bytes"] > 0
    # Every chunk of the store was embedded once by each new model, and stored.
    app = Archivist(settings)
    base = app.store("shop_docs")
    payloads = base.payloads()
    texts = sorted(p["text"] for p in payloads)
    for name in ("shop_docs__all_minilm", "shop_docs__llama3_2_1b"):
        copy = KnowledgeStore(app._client, name)
        assert sorted(p["text"] for p in copy.payloads()) == texts
    app.close()
    # What is embedded is each chunk's indexed text: its headings, then its own text.
    texts = sorted(indexed_text(p["text"], p.get("metadata") or {}) for p in payloads)
    embedded = {m: [] for m in EMBEDDERS}
    for body in served.requests_to("/api/embed"):
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        embedded[body["model"].removesuffix(":latest")] += inputs
    for model in ("all-minilm", "llama3.2:1b"):
        assert sorted(t for t in embedded[model] if t in texts) == texts
    assert not set(embedded["nomic-embed-text"]) & set(texts)
    # The figures are exactly what searching each store gives.
    for summary in embedders.values():
        assert summary["modes"] == expected_figures(settings, dataset, summary["store"])
    nomic, chat = embedders["nomic-embed-text"]["modes"], embedders["llama3.2:1b"]["modes"]
    assert nomic["dense"]["hit@k"] >= 0.9 and chat["dense"]["hit@k"] <= 0.6
    assert nomic["dense"]["mrr@k"] > 2 * chat["dense"]["mrr@k"]
    assert nomic["sparse"] == chat["sparse"]  # BM25 does not depend on the embedder
    assert "llama3.2:1b is a chat model, not an embedding model" in done.stderr
    markdown = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## Embedding models" in markdown and "## Chat models" not in markdown
    assert "| llama3.2:1b (chat model) | shop_docs__llama3_2_1b | built |" in markdown
    assert "generated by `archivist eval generate` from the store shop_docs" in markdown
    assert report["provenance"]["model"] == "qwen2.5:3b" and report["provenance"]["seed"] == 42
    assert (tmp_path / "report" / "embedders.png").stat().st_size > 0
    assert not (tmp_path / "report" / "chart.png").exists()

    served.clear_requests()
    again = compare(served, home, dataset, tmp_path / "again", "--model", "qwen2.5:3b")

    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert [e["reused"] for e in second["embedders"]] == [True, True, True]
    assert [e["ingest_s"] for e in second["embedders"]] == [
        e["ingest_s"] for e in report["embedders"]
    ]
    assert [e["modes"] for e in second["embedders"]] == [e["modes"] for e in report["embedders"]]
    reembedded = [
        text
        for body in served.requests_to("/api/embed")
        for text in (body["input"] if isinstance(body["input"], list) else [body["input"]])
        if text in texts
    ]
    assert reembedded == []  # reused stores are not embedded again
    assert [m["model"] for m in second["models"]] == ["qwen2.5:3b"]  # chat models beside them
    markdown = (tmp_path / "again" / "report.md").read_text(encoding="utf-8")
    assert "## Embedding models" in markdown and "## Chat models" in markdown
    assert (tmp_path / "again" / "chart.png").exists()


def test_a_store_of_other_chunks_is_rebuilt_and_embedders_need_one_store(
    served, home, store, settings, tmp_path
):
    dataset = tmp_path / "cases.jsonl"
    case = {
        "id": "refund",
        "question": "How many days do I have to ask for a refund?",
        "expect_sources": ["refund.md"],
    }
    dataset.write_text(json.dumps(case) + "\n", encoding="utf-8")
    app = Archivist(settings)
    first = app.embedder_store("shop_docs", "all-minilm")
    assert app.embedder_store("shop_docs", "all-minilm")["reused"]
    copy = KnowledgeStore(app._client, first["store"])
    copy.annotate(built_from="other chunks")
    rebuilt = app.embedder_store("shop_docs", "all-minilm")
    assert not rebuilt["reused"] and rebuilt["chunks"] == first["chunks"] == copy.count()
    app.close()

    two = run_cli(
        "eval", str(dataset), "--store", "shop_docs", "--store", "hr_docs",
        "--embed-model", "all-minilm", ollama_url=served.url, home=home,
    )  # fmt: skip
    assert two.returncode == 1
    assert "compared on one store at a time" in two.stderr


def test_a_users_store_with_the_copys_name_is_never_overwritten(served, home, store, settings):
    app = Archivist(settings)
    own = KnowledgeStore(app._client, "shop_docs__all_minilm")
    own.ensure(KnowledgeStore(app._client, "shop_docs").fingerprint, "my own store")
    before = own.count()
    with pytest.raises(ArchivistError) as raised:
        app.embedder_store("shop_docs", "all-minilm")
    assert "already exists and was not made by `eval --embed-model`" in raised.value.message
    assert "archivist delete shop_docs__all_minilm" in raised.value.fix
    assert own.exists() and own.count() == before and own.description == "my own store"
    app.close()


def test_an_embedder_copy_keeps_the_stores_sparse_scheme(ollama, home, tmp_path):
    """Embedders are compared with the same BM25: a store of the older scheme (the 0.1.0 home)
    is used as it is for its own model, and copied with its scheme for another."""
    from test_release_store import released_home

    from archivist.tools import sparse

    released_home(home)
    app = Archivist(Settings(ollama_host=ollama.url, home=home))
    try:
        own = app.embedder_store("shop_docs", "nomic-embed-text")
        other = app.embedder_store("shop_docs", "all-minilm")
        assert own["store"] == "shop_docs" and own["reused"]
        copy = KnowledgeStore(app._client, other["store"])
        assert other["store"] != "shop_docs" and copy.sparse_scheme == sparse.LEGACY_SCHEME
        base = app.store("shop_docs")
        assert base.sparse_scheme == sparse.LEGACY_SCHEME and copy.count() == base.count()
    finally:
        app.close()
