"""The benchmark must not rot: its functions run end to end on a tiny corpus (no timings)."""

import importlib.util
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
import perf  # noqa: E402

# The default budget as the app has it: the loading child (tests/conftest.py).
pytestmark = pytest.mark.loading_child


def test_the_corpus_is_deterministic_and_mixes_english_and_chinese(tmp_path):
    first = perf.make_corpus(tmp_path / "a", files=8, chars=1500)
    second = perf.make_corpus(tmp_path / "b", files=8, chars=1500)
    files = sorted(first.rglob("*.md"))
    assert len(files) == 8
    texts = [f.read_text(encoding="utf-8") for f in files]
    assert texts == [f.read_text(encoding="utf-8") for f in sorted(second.rglob("*.md"))]
    assert all(len(t) >= 1500 for t in texts)
    assert sum("天内办理" in t for t in texts) == 2


def test_the_mixed_corpus_is_half_chinese_and_the_limits_follow_the_cost_model(tmp_path):
    corpus = perf.make_corpus(tmp_path / "m", files=6, chars=1500, chinese_every=2)
    texts = [f.read_text(encoding="utf-8") for f in sorted(corpus.rglob("*.md"))]
    assert sum("天内办理" in t for t in texts) == 3
    config = perf.Config(
        char_embed_delay=0.01, char_embed_delay_per_text=0.001, char_embed_delay_per_kchar=0.002
    )
    # 130,000 characters: 130 texts of 1,000, in 3 requests of up to 64, 2 served at a time.
    assert perf.char_limit(config, ["x" * 65_000, "y" * 65_000]) == (
        pytest.approx((3 * 0.01 + 130 * 0.001 + 130 * 0.002) / 2)
    )
    # As sent: 2 requests of 64 and 1 text, 90,000 and 500 characters.
    assert perf.sent_floor(config, [(64, 90_000), (1, 500)]) == pytest.approx(
        (2 * 0.01 + 65 * 0.001 + 90.5 * 0.002) / 2
    )
    assert perf.longest_gap([3.0, 1.0, 1.5, 4.0]) == 1.5
    assert perf.longest_gap([2.0]) == 0.0


def test_every_measurement_runs_on_a_tiny_corpus(tmp_path):
    config = perf.Config(
        files=12,
        synthetic_chunks=(300, 1200),
        memory_chunks=200,
        queries=8,
        agent_turns=3,
        cli_runs=1,
        embed_delay=0.0,
        embed_delay_per_text=0.0,
        mixed_files=6,
        char_embed_delay=0.0,
        char_embed_delay_per_text=0.0,
        char_embed_delay_per_kchar=0.0,
        langchain=importlib.util.find_spec("langchain_qdrant") is not None,
        fixed_work_runs=1,
    )
    results = perf.run(config, tmp_path, log=lambda message: None)
    assert results["ingest"]["files"] == 12
    assert results["ingest"]["chunks"] == results["retrieval_ingested"]["chunks"] > 12
    assert results["ingest"]["embed_requests"] > 0
    assert results["reingest"]["unchanged"] == 12 and results["reingest"]["embed_requests"] == 0
    synthetic = [found["retrieval"] for found in results["synthetic"]]
    assert [found["chunks"] for found in synthetic] == [300, 1200]
    assert results["memory"]["chunks"] > 0 and results["memory"]["peak_rss_mb_ingest"] > 0
    assert all(set(found["hybrid"]) == {"p50_ms", "p95_ms"} for found in synthetic)
    assert results["limit"]["seconds"] == min(
        results["limit"]["seconds_2"], results["limit"]["seconds_4"]
    )
    mixed = results["mixed"]
    assert mixed["files"] == 6 and mixed["chars"] > 6 * 4000
    assert mixed["instant"]["chunks"] == mixed["ingest"]["chunks"] > 6
    assert mixed["instant"]["cpu_s"] > 0 and mixed["instant"]["cpu_ms_per_chunk"] > 0
    assert 0 < mixed["instant"]["upsert_ms_per_chunk"] < mixed["instant"]["cpu_ms_per_chunk"]
    # Too small a run to start the splitting helper: the children's CPU is the loading
    # process's alone (its start, about 0.2 s, and the loads).
    assert 0 < mixed["instant"]["helper_cpu_s"] < 3
    assert mixed["instant"]["total_cpu_ms_per_chunk"] > mixed["instant"]["cpu_ms_per_chunk"]
    assert mixed["import_cpu_s"] > 0
    assert mixed["instant_no_helper"]["chunks"] == mixed["instant"]["chunks"]
    assert 0 < mixed["instant_no_helper"]["helper_cpu_s"] < 3  # the loading process
    assert results["memory"]["longest_embed_gap_s"] >= 0
    assert mixed["reingest"]["unchanged"] == 6 and mixed["reingest"]["embed_requests"] == 0
    assert mixed["ingest"]["longest_embed_gap_s"] >= 0
    # Every stored chunk was sent once, with the task prefix, in requests of at most 64,
    # after the one text that asks a new store's embedding model for its dimension.
    sent = mixed["ingest"]["sent"]
    assert sent["texts"] == mixed["ingest"]["chunks"] + 1
    assert sent["requests"] >= sent["texts"] / 64 and sent["chars"] > sent["texts"] * 17
    assert set(results["memory"]["cpu_s"]) == {"ingest", "close", "helper", "index", "fake"}
    assert results["memory"]["cpu_s"]["ingest"] > 0 and results["memory"]["cpu_s"]["fake"] >= 0
    assert results["cli"]["ask_first_request_s"] > 0
    assert results["memory"]["limit_s"] >= 0
    commands = results["commands"]
    assert commands["ingest"]["chunks"] == mixed["ingest"]["chunks"]
    assert commands["ingest"]["sent"] == mixed["ingest"]["sent"]
    assert commands["reingest"]["unchanged"] == 6 and commands["reingest"]["embed_requests"] == 0
    for name in ("help", "stores", "sources", "logs", "search"):
        assert (
            commands[name]["cpu_s"] > 0 and commands[name]["wall_s"] >= commands[name]["cpu_s"] / 4
        )
    rendered = perf.table(results)
    assert "`archivist stores` (a process)" in rendered and "against the floor" in rendered
    assert "characters sent to the embedder against the corpus's" in rendered
    assert "Embedding limit" in rendered and "`archivist chat` until its prompt" in rendered
    assert "start → first request to Ollama" in rendered and "ms a chunk" in rendered
    assert "plus its helper process" in rendered and "importing what an ingest needs" in rendered
    assert "with no helper" in rendered
    assert "index build included (cost-model limit)" in rendered
    assert "requests as sent" in rendered and "that 2 cores give" in rendered
    assert results["machine"]["fixed_work_cpu_s_at_start"] > 0
    assert "a fixed piece of Python work took" in rendered
    assert "hybrid, synthetic store of 1200 chunks" in rendered


def test_the_concurrency_benchmark_runs_on_a_tiny_store(tmp_path):
    import concurrency

    # 320 chunks: 40 whole documents of 8 (the synthetic store's documents).
    results = concurrency.run(tmp_path, 320, queries=12, rounds=1)
    assert results["chunks"] == 320 and results["built"]["upsert_s"] >= 0
    for key in ("startup_before_s", "startup_after_s", "turn_after_read_s", "count_partial_s"):
        assert results[key] > 0
    assert set(results["turn_before"]) == set(results["turn_after"]) == {"p50_ms", "p95_ms"}
    # The other process's one-chunk write is a complete document: nothing left out.
    assert results["partial_versions"] == 0
    rendered = concurrency.table(results)
    assert "`ask` start-up" in rendered and "after another process wrote" in rendered


def test_the_cpu_of_a_process_tree_is_told_by_kind_of_process():
    # A parent that waits for a child whose command line names an index build; both work.
    child = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    parent = (
        "import subprocess, sys, time\n"
        "end = time.process_time() + 0.2\n"
        "while time.process_time() < end: pass\n"
        f"subprocess.run([sys.executable, '-c', {child!r} + '  # compact_shard'])\n"
    )
    started = subprocess.Popen([sys.executable, "-c", parent])
    tree = perf.ProcessTreeCPU(started.pid, interval=0.02)
    started.wait()
    kinds = tree.stop()
    assert list(kinds)[:2] == ["main", "helper"]  # every kind named, in PROCESS_NAMES order
    assert kinds["main"] >= 0.1
    assert kinds["index"] >= 0.2
    assert kinds["helper"] == kinds["loading"] == 0.0
