"""An ingest or sync with nothing to do is told from what the store recorded, without the
ingest graph; whatever there is to do goes to the graph, and both report the same."""

import json
import os
import time

import pytest
from conftest import run_cli, write_files

from archivist.ingest import pipeline

OLLAMA = "http://127.0.0.1:9"  # never reached: the in-process fake models answer


def cli(home, *args, code=0):
    done = run_cli(*args, ollama_url=OLLAMA, home=home)
    assert done.returncode == code, done.stdout + done.stderr
    return done


def report(home, *args, code=0) -> dict:
    found = json.loads(cli(home, "ingest", *args, "--json", code=code).stdout)
    found.pop("seconds")
    return found


@pytest.fixture
def graph_runs(monkeypatch) -> list[str]:
    """The stores the ingest graph was planned for, run after run."""
    planned: list[str] = []
    plan = pipeline.plan_ingest

    def counting(request, *args, **kwargs):
        planned.append(request.store)
        return plan(request, *args, **kwargs)

    monkeypatch.setattr(pipeline, "plan_ingest", counting)
    return planned


@pytest.fixture
def kb(tmp_path):
    return write_files(
        tmp_path / "kb",
        {
            "refund.md": "# Refunds\n\nRefunds are paid within 30 days.",
            "guide/tents.md": "# Tents\n\nPitch the tent out of the wind.",
            "guide/退货.md": "# 退货\n\n退货须在三十天内申请。",
            "logo.png": b"\x89PNG\r\n\x1a\n",
        },
    )


def test_an_unchanged_ingest_is_reported_as_the_graph_reports_it(
    fake_models, home, kb, graph_runs, monkeypatch
):
    first = report(home, str(kb), "--store", "s")
    assert len(first["stored"]) == 3 and graph_runs == ["s"]
    told = report(home, str(kb), "--store", "s")
    assert graph_runs == ["s"]  # told without the graph
    # The graph's own report of the same run, word for word.
    with monkeypatch.context() as patch:
        patch.setattr(pipeline, "unchanged_report", lambda *a, **k: None)
        ran = report(home, str(kb), "--store", "s")
    assert graph_runs == ["s", "s"]
    assert told == ran
    assert sorted(told["unchanged"]) == ["guide/tents.md", "guide/退货.md", "refund.md"]
    assert told["stored"] == [] and told["points"] == first["points"]
    assert told["skipped"] and told["skipped"][0]["source"] == "logo.png"
    # Read once and found not to be a document, it is no source, and nothing new to sync.
    rows = json.loads(cli(home, "sources", "--store", "s", "--json").stdout)
    assert {r["source"]: r["status"] for r in rows} == dict.fromkeys(told["unchanged"], "ok")
    # A sync with nothing to do, and a part of the root named again, are told too.
    assert "3 unchanged" in cli(home, "sync").stdout
    assert sorted(report(home, str(kb / "guide"), "--store", "s")["unchanged"]) == [
        "guide/tents.md",
        "guide/退货.md",
    ]
    assert graph_runs == ["s", "s"]


def _touch(path) -> None:
    later = time.time_ns() + 5_000_000_000
    os.utime(path, ns=(later, later))


CHANGES = {
    "a file saved again, unchanged": lambda kb: _touch(kb / "refund.md"),
    "a file edited": lambda kb: (kb / "refund.md").write_text("# Refunds\n\nWithin 14 days."),
    "a new file": lambda kb: (kb / "new.md").write_text("# New\n\nA new page."),
    "an unreadable file": lambda kb: (kb / "bad.md").write_bytes(b"\0\0\0binary"),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_file_that_moved_goes_to_the_graph(fake_models, home, kb, graph_runs, change):
    report(home, str(kb), "--store", "s")
    CHANGES[change](kb)
    code = 1 if change == "an unreadable file" else 0
    after = report(home, str(kb), "--store", "s", code=code)
    assert graph_runs == ["s", "s"], change
    if change == "a file saved again, unchanged":
        assert after["stored"] == []  # hashed, found the same, and recorded
        report(home, str(kb), "--store", "s")
        assert graph_runs == ["s", "s"]  # the new time recorded: told again


def test_runs_that_would_change_the_store_go_to_the_graph(fake_models, home, kb, graph_runs):
    report(home, str(kb), "--store", "s")
    (kb / "guide" / "tents.md").unlink()
    # Without --prune a deleted file's chunks stay, and nothing else changed.
    assert report(home, str(kb), "--store", "s")["removed"] == []
    assert graph_runs == ["s"]
    assert report(home, str(kb), "--store", "s", "--prune")["removed"] == ["guide/tents.md"]
    assert graph_runs == ["s", "s"]
    for args in (
        ("--description", "Shop policies"),  # recorded by the graph's run
        ("--chunk-size", "400"),  # the root's options change: chunks are made again
        ("--embed-model", "all-minilm"),  # another model than the store's: refused there
    ):
        code = 1 if args[0] == "--embed-model" else 0
        cli(home, "ingest", str(kb), "--store", "s", *args, code=code)
        assert graph_runs[-1] == "s" and len(graph_runs) == 3, args
        graph_runs.clear()
        graph_runs += ["s", "s"]
    other = write_files(kb.parent / "other", {"a.md": "# A\n\nAnother root."})
    report(home, str(other), "--store", "s")  # a root not recorded yet
    assert len(graph_runs) == 3


def test_a_roots_file_records_are_kept_as_one_text_and_an_earlier_releases_are_read(
    fake_models, archivist, kb, graph_runs
):
    archivist.ingest([str(kb)], "s")
    store = archivist.store("s")
    [root] = store.info()["roots"]
    # One string to whoever parses the store's metadata: parsed only by what reads files.
    assert isinstance(root["files"], str) and isinstance(root["skipped"], str)
    files = json.loads(root["files"])
    assert sorted(files) == ["guide/tents.md", "guide/退货.md", "refund.md"]
    size, mtime_ns, digest, settings = files["refund.md"]
    assert (size, mtime_ns) == (
        os.stat(kb / "refund.md").st_size,
        os.stat(kb / "refund.md").st_mtime_ns,
    )
    assert len(digest) == 64 and settings
    assert list(json.loads(root["skipped"])) == ["logo.png"]
    # As the release before kept them (objects): read as they are, nothing hashed again.
    earlier = {**root, "files": files, "failed": {}, "skipped": json.loads(root["skipped"])}
    store.annotate(roots=[earlier])
    planned = len(graph_runs)
    report = archivist.ingest([str(kb)], "s")
    assert sorted(report.unchanged) == sorted(files) and len(graph_runs) == planned
    # The next run that records something writes them as one text again.
    (kb / "new.md").write_text("# New\n\nA new page.")
    archivist.ingest([str(kb)], "s")
    [root] = store.info()["roots"]
    assert sorted(json.loads(root["files"])) == sorted([*files, "new.md"])
    assert json.loads(root["files"])["refund.md"] == [size, mtime_ns, digest, settings]
