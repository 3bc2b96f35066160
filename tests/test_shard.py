"""Sharded ingest: N runs of `--shard i/N` together make exactly the store one run makes."""

import json
import shutil
import subprocess
import sys
from collections import Counter

import pytest
from conftest import SHOP, run_cli, write_files

from archivist.ingest.graph import DIMENSION_PROBE
from archivist.ingest.sync import Shard
from archivist.tools.errors import ArchivistError

RECORDS = "\n".join(
    json.dumps({"id": f"P{i}", "text": f"Product {i}: a tent for {i + 1} people, very light."})
    for i in range(8)
)


def corpus(tmp_path):
    root = tmp_path / "kb"
    shutil.copytree(SHOP, root)
    write_files(root, {"catalogue/products.jsonl": RECORDS, "notes/readme.txt": "Read me first."})
    return root


def points(archivist, store):
    """Every stored point: id → payload without its ingest time."""
    found, offset = {}, None
    while True:
        batch, offset = archivist._client.scroll(store, limit=256, offset=offset)
        for p in batch:
            found[str(p.id)] = {
                k: v for k, v in p.payload.items() if k not in ("ingested_at", "version")
            }  # "version" holds the time too
        if offset is None:
            return found


def embedded_texts(ollama):
    texts = [t for body in ollama.requests_to("/api/embed") for t in body["input"]]
    return Counter(t for t in texts if not t.endswith(DIMENSION_PROBE))


def test_the_union_of_the_shards_is_a_full_ingest_with_no_overlap(archivist, ollama, tmp_path):
    root = corpus(tmp_path)
    full = archivist.ingest([str(root)], "full", description="everything", batch_size=4)
    full_texts = embedded_texts(ollama)
    ollama.clear_requests()

    reports = [
        archivist.ingest([str(root)], "sharded", description="everything", shard=f"{i}/3")
        for i in (1, 2, 3)
    ]
    parts = [{s["source"] for s in r.stored} for r in reports]
    assert all(parts), "every shard of this corpus gets some sources"
    assert sum(len(p) for p in parts) == len(set().union(*parts)), "no source in two shards"
    assert set().union(*parts) == {s["source"] for s in full.stored}
    # A record file is read by every shard, and its records are spread over them.
    records = [{s for s in p if s.startswith("catalogue/products.jsonl#")} for p in parts]
    assert sum(1 for r in records if r) >= 2
    assert [str(r.shard) for r in reports] == ["1/3", "2/3", "3/3"]

    assert points(archivist, "sharded") == points(archivist, "full")
    assert embedded_texts(ollama) == full_texts, "each chunk embedded once, by one shard"
    assert archivist.store("sharded").description == "everything"


def test_a_shard_run_again_embeds_nothing(archivist, ollama, tmp_path):
    root = corpus(tmp_path)
    first = archivist.ingest([str(root)], "docs", shard="2/3")
    ollama.clear_requests()
    again = archivist.ingest([str(root)], "docs", shard="2/3")
    assert again.stored == [] and again.chunks_embedded == 0
    assert sorted(again.unchanged) == sorted(s["source"] for s in first.stored)
    assert embedded_texts(ollama) == Counter()


def test_prune_with_a_shard_removes_only_that_shards_sources(archivist, tmp_path):
    root = corpus(tmp_path)
    for i in (1, 2):
        archivist.ingest([str(root)], "docs", shard=f"{i}/2")
    first, second = Shard(1, 2), Shard(2, 2)
    gone_first = next(p for p in sorted(root.glob("*.md")) if first.owns(p.name)).name
    gone_second = next(p for p in sorted(root.glob("*.md")) if second.owns(p.name)).name
    (root / gone_first).unlink()
    (root / gone_second).unlink()

    report = archivist.ingest([str(root)], "docs", prune=True, shard="1/2")
    assert report.removed == [gone_first]
    held = archivist.store("docs").sources()
    assert gone_first not in held and gone_second in held

    report = archivist.ingest([str(root)], "docs", prune=True, shard="2/2")
    assert report.removed == [gone_second]
    assert gone_second not in archivist.store("docs").sources()


def test_shards_are_the_same_in_every_process_and_evenly_spread():
    names = [f"folder/file-{i}.md" for i in range(2000)]
    here = [next(i for i in range(1, 5) if Shard(i, 4).owns(n)) for n in names]
    script = (
        "import json, sys; from archivist.ingest.sync import Shard; names = json.load(sys.stdin); "
        "print(json.dumps([next(i for i in range(1, 5) if Shard(i, 4).owns(n)) for n in names]))"
    )
    for seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", script],
            input=json.dumps(names),
            capture_output=True,
            text=True,
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            check=True,
        )
        assert json.loads(other.stdout) == here
    counts = Counter(here)
    assert set(counts) == {1, 2, 3, 4}
    assert all(400 <= c <= 600 for c in counts.values()), counts


@pytest.mark.parametrize("text", ["0/3", "4/3", "1/0", "a/b", "3", "-1/2", "1/2/3", ""])
def test_a_bad_shard_is_refused_with_the_expected_form(text):
    with pytest.raises(ArchivistError) as refused:
        Shard.parse(text)
    assert f"'{text}' is not a shard." in str(refused.value)
    assert "i/N with 1 ≤ i ≤ N" in str(refused.value)


def test_the_cli_refuses_a_bad_shard_before_any_work(home, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nText."})
    done = run_cli(
        "ingest",
        str(root),
        "--store",
        "kb",
        "--shard",
        "4/3",
        ollama_url="http://127.0.0.1:9",
        home=home,
    )
    assert done.returncode == 1
    assert "Error: '4/3' is not a shard." in done.stderr
    assert "--shard 1/3" in done.stderr and "Traceback" not in done.stderr
    assert not (home / "edge").exists()


def test_the_cli_ingests_one_shard_and_says_so(ollama, home, tmp_path):
    root = corpus(tmp_path)
    done = run_cli(
        "ingest", str(root), "--store", "kb", "--shard", "1/2", "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["shard"] == "1/2"
    assert report["stored"] and all(Shard(1, 2).owns(s["source"]) for s in report["stored"])


def test_reindex_cannot_be_sharded(archivist, tmp_path):
    root = corpus(tmp_path)
    with pytest.raises(ArchivistError, match="--reindex cannot be combined with --shard"):
        archivist.ingest([str(root)], "docs", reindex=True, shard="1/2")
