"""benchmarks/scale.py must not rot: it runs end to end on tiny stores (no timings)."""

import json
import subprocess
import sys

from conftest import ROOT


def test_the_scale_benchmark_runs_on_tiny_stores(tmp_path):
    out = tmp_path / "scale.json"
    args = ["--sizes", "400", "--queries", "5", "--runs", "1", "--out", str(out)]
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "scale.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(out.read_text(encoding="utf-8"))["results"]
    assert [r["layout"] for r in results] == ["memory", "disk"]
    assert [r["store"]["vectors_on_disk"] for r in results] == [False, True]
    for found in results:
        assert found["chunks"] > 300
        assert 0 < found["dense"]["hit_at_10"] <= 1
        for command in ("search", "search_zh", "sources", "stores"):
            assert found[command]["peak_rss_mb"] > 0
        assert found["server"]["p50_ms"] > 0 and found["server"]["memory_mb"]["VmRSS"] > 0
    assert "| memory |" in done.stdout and "| disk |" in done.stdout
