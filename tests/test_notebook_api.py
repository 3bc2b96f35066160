"""The public functions the notebooks call: stored chunks, retrieval ranks, turn passages."""

import matplotlib
import pytest
from conftest import SHOP
from fake_ollama import DEFAULT_MODELS, FakeOllama

from archivist.agent.turn import turn_passages
from archivist.app import Archivist
from archivist.evaluation.report import chart
from archivist.evaluation.run import Case, hit_rates, retrieval_ranks
from archivist.notebook import NotebookProgress, duration
from archivist.settings import Settings
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import CaseRan, StoreReady


def test_chunks_are_records_of_what_the_store_holds(archivist: Archivist, shop_store: str) -> None:
    store = archivist.store(shop_store)
    chunks = store.chunks()

    assert len(chunks) == store.count()
    assert [(c["source"], c["chunk_index"]) for c in chunks] == sorted(
        (c["source"], c["chunk_index"]) for c in chunks
    )
    assert {c["source"] for c in chunks} == {path.name for path in SHOP.glob("*.md")}
    for chunk in chunks:
        # Offsets point into the file's text (these Markdown files have no front matter).
        text = (SHOP / chunk["source"]).read_text(encoding="utf-8")
        assert text[chunk["start"] : chunk["end"]] == chunk["text"]
        assert chunk["size"] == len(chunk["text"])
    phone = next(c for c in chunks if "+49 30 1234 5678" in c["text"])
    assert phone["source"] == "contact.md"
    assert phone["heading"] == "Contact and Customer Service › Phone"


def test_chunks_of_some_sources(archivist: Archivist, shop_store: str) -> None:
    store = archivist.store(shop_store)
    chunks = store.chunks(sources=["refund.md", "配送说明.md"])

    assert {c["source"] for c in chunks} == {"refund.md", "配送说明.md"}
    held = store.sources()
    assert len(chunks) == held["refund.md"].chunks + held["配送说明.md"].chunks
    assert [c["chunk_index"] for c in chunks if c["source"] == "refund.md"] == list(
        range(held["refund.md"].chunks)
    )


def test_retrieval_ranks_find_the_best_rank_of_an_expected_source(
    archivist: Archivist, shop_store: str
) -> None:
    cases = [
        Case("rma", "What does an RMA code look like?", expect_sources=("returns.md",)),
        Case("missing", "What does an RMA code look like?", expect_sources=("nowhere.md",)),
        Case("greeting", "hi!", expect_tools=()),
    ]
    ranks = retrieval_ranks(archivist, cases, shop_store, ["dense", "sparse"], k=4)

    assert [(r["case"], r["mode"]) for r in ranks] == [
        ("rma", "dense"),
        ("rma", "sparse"),
        ("missing", "dense"),
        ("missing", "sparse"),
    ]
    for record in ranks:
        results = archivist.search(record["question"], shop_store, 4, record["mode"])
        assert record["top_source"] == results[0]["source"]
        expected = [r["rank"] for r in results if r["source"] in record["expect_sources"]]
        assert record["rank"] == (expected[0] if expected else None)
        assert record["store"] == shop_store and record["k"] == 4
    assert ranks[0]["rank"] is not None and ranks[2]["rank"] is None


def test_hit_rates_per_store_and_mode() -> None:
    def record(store: str, mode: str, rank: int | None) -> dict:
        return {"store": store, "mode": mode, "k": 5, "rank": rank}

    ranks = [record("a", "hybrid", rank) for rank in (1, 3, None, 2)]
    ranks += [record("b", "hybrid", 5), record("a", "dense", 4)]

    rows = {(r["store"], r["mode"], r["k"]): r for r in hit_rates(ranks, [1, 3, 5])}

    assert rows["a", "hybrid", 1]["hit_rate"] == 0.25
    assert rows["a", "hybrid", 3]["hit_rate"] == 0.75
    assert rows["a", "hybrid", 3]["mrr"] == pytest.approx((1 + 1 / 3 + 1 / 2) / 4)
    assert rows["a", "hybrid", 5]["cases"] == 4
    assert [rows["b", "hybrid", k]["hit_rate"] for k in (1, 3, 5)] == [0, 0, 1]
    assert rows["a", "dense", 5]["mrr"] == 0.25
    with pytest.raises(ValueError, match="k=5"):
        hit_rates(ranks, [10])


def test_turn_passages_lay_out_the_trajectory(
    archivist: Archivist, shop_store: str, ollama: FakeOllama
) -> None:
    ollama.script(
        "qwen2.5:3b",
        {"tool_calls": [{"name": "search_shop_docs", "arguments": {"q": "refund"}}]},
        {"tool_calls": [{"name": "search_shop_docs", "arguments": {"query": "refund window"}}]},
        {"content": "Within 30 days [2]."},
    )
    turn = archivist.ask("How long can I ask for a refund?", [shop_store])

    passages = turn_passages(turn)

    failed, *found = passages
    assert failed["call"] == 1 and failed["args"] == {"q": "refund"} and "query" in failed["error"]
    results = turn["tool_calls"][1]["results"]
    assert [(p["call"], p["tool"], p["args"]) for p in found] == [
        (2, "search_shop_docs", {"query": "refund window"})
    ] * len(results)
    assert [(p["n"], p["source"], p["score"], p["text"]) for p in found] == [
        (r["n"], r["source"], r["score"], r["text"]) for r in results
    ]
    assert [p["n"] for p in found if p["cited"]] == [2]
    assert found[1]["heading"] == " › ".join(results[1]["metadata"]["headings"])


def test_the_eval_chart_leaves_the_callers_matplotlib_backend_alone(tmp_path) -> None:
    summary = {
        "model": "m",
        "mode": "agent",
        "metrics": {"tool_decision_accuracy": 1.0, "latency_p50_ms": 3, "latency_p95_ms": 5},
    }
    report = {"models": [summary], "k": 5, "repeat": 1, "dataset": "d.jsonl", "cases": 1}
    before = matplotlib.get_backend()
    matplotlib.use("pdf")
    try:
        chart({**report, "stores": ["shop_docs"]}, tmp_path / "chart.png")
        assert matplotlib.get_backend() == "pdf"
    finally:
        matplotlib.use(before)
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_failed_call_releases_the_store_it_opened(
    settings: Settings, shop_store: str, ollama: FakeOllama
) -> None:
    archivist = Archivist(settings)
    ollama.remove_model("nomic-embed-text")

    with pytest.raises(ArchivistError) as failed:
        archivist.search("refund", shop_store)

    assert "Pull it with `ollama pull nomic-embed-text`" in str(failed.value)
    assert "client" not in vars(archivist)  # the embedded store is unlocked again
    ollama.add_model(next(s for s in DEFAULT_MODELS if s.name.startswith("nomic-embed-text")))
    assert archivist.search("refund", shop_store)  # and opens again on the next call


def test_a_failed_call_keeps_a_store_opened_before_for_what_uses_it(
    archivist: Archivist, shop_store: str
) -> None:
    store = archivist.store(shop_store)

    with pytest.raises(ArchivistError, match=r"Pull it with `ollama pull qwen9:1b`"):
        archivist.ask("How long is the refund window?", [shop_store], "qwen9:1b")

    assert store.count() > 0  # a store the notebook holds still answers


def test_progress_counts_the_runs_and_says_the_time_left(monkeypatch) -> None:
    shown = []

    class Handle:
        def update(self, html) -> None:
            shown.append(html.data)

    monkeypatch.setattr("IPython.display.display", lambda html, display_id: Handle())
    clock = iter([100.0, 100.0, 110.0, 120.0])  # started, first shown, two runs done
    monkeypatch.setattr("archivist.notebook.time.monotonic", lambda: next(clock))
    progress = NotebookProgress(3)

    progress(CaseRan("qwen2.5:3b", "refund-window", 0))
    progress(StoreReady("nomic-embed-text"))  # not a case: the bar stays
    progress(CaseRan("qwen2.5:3b", "greeting", 0))

    assert '<progress value="1" max="3"' in shown[0] and "1/3 runs" in shown[0]
    assert "refund-window · 10 s elapsed, about 20 s left" in shown[0]
    assert "2/3 runs" in shown[1] and "20 s elapsed, about 10 s left" in shown[1]
    assert [duration(s) for s in (0.4, 59, 60, 200)] == ["0 s", "59 s", "1 min", "3 min 20 s"]


def test_the_facade_deletes_a_source_and_a_store_and_says_what_there_was(
    archivist: Archivist, shop_store: str
) -> None:
    held = archivist.store_size(shop_store)
    refund = archivist.store(shop_store).sources()["refund.md"]
    done = archivist.delete_source(shop_store, "refund.md")
    assert done == {"source": "refund.md", "chunks": refund.chunks}
    assert "refund.md" not in archivist.store(shop_store).source_names()
    with pytest.raises(ArchivistError, match="has no source 'refund.md'") as missing:
        archivist.delete_source(shop_store, "refund.md")
    assert f"archivist sources --store {shop_store}" in missing.value.fix
    assert archivist.store_names() == [shop_store]
    assert archivist.delete_store(shop_store) == held - refund.chunks
    assert archivist.store_names() == []
    with pytest.raises(ArchivistError, match=f"no store named '{shop_store}'"):
        archivist.store_size(shop_store)
