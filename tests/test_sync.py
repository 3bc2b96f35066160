"""Status against disk, `sync`, `delete --root` and watching: a store kept as its roots are."""

import json
import os
import threading
import time
from contextlib import contextmanager

import pytest
from conftest import run_cli, write_files

from archivist.app import Archivist
from archivist.settings import Settings
from archivist.watching import Watcher

OLLAMA = "http://127.0.0.1:9"  # never reached: the in-process fake models answer


def cli(home, *args, code=0):
    done = run_cli(*args, ollama_url=OLLAMA, home=home)
    assert done.returncode == code, done.stdout + done.stderr
    return done


def statuses(home, store="s") -> dict[str, tuple[str, str | None]]:
    rows = json.loads(cli(home, "sources", "--store", store, "--json").stdout)
    return {r["source"]: (r["status"], r.get("reason")) for r in rows}


def texts(home, store="s") -> dict[str, str]:
    """Each stored source's text, its chunks joined."""
    app = Archivist(Settings(ollama_host=OLLAMA, home=home))
    try:
        found: dict[str, list] = {}
        for chunk in app.store(store).chunks():
            found.setdefault(chunk["source"], []).append(chunk["text"])
        return {source: "\n".join(parts) for source, parts in found.items()}
    finally:
        app.close()


def test_sources_tells_each_status_hashing_only_what_moved(
    fake_models, home, tmp_path, monkeypatch
):
    kb = write_files(
        tmp_path / "kb",
        {
            "same.md": "# Same\n\nUntouched.",
            "touched.md": "# Touched\n\nSaved again, unchanged.",
            "edited.md": "# Edited\n\nBefore.",
            "gone.md": "# Gone\n\nDeleted later.",
            "bad.md": b"\0\0\0binary",
        },
    )
    cli(home, "ingest", str(kb), "--store", "s", code=1)  # bad.md fails
    (kb / "edited.md").write_text("# Edited\n\nAfter, and longer.")
    touched = kb / "touched.md"
    os.utime(touched, ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    (kb / "gone.md").unlink()
    (kb / "fresh.md").write_text("# Fresh\n\nNot stored yet.")
    hashed = []
    from archivist.ingest import status

    real = status.content_hash
    monkeypatch.setattr(
        status, "content_hash", lambda path, *a: hashed.append(path.name) or real(path, *a)
    )
    assert statuses(home) == {
        "same.md": ("ok", None),
        "touched.md": ("ok", None),
        "edited.md": ("changed", None),
        "gone.md": ("deleted", None),
        "fresh.md": ("new", None),
        "bad.md": ("failed", "binary content (NUL bytes) in a text file"),
    }
    assert sorted(hashed) == ["edited.md", "touched.md"]  # the others did not move
    text = cli(home, "sources", "--store", "s").stdout.splitlines()
    assert text[0] == f"{kb.resolve()} (kb): 2 ok, 1 changed, 1 deleted, 1 new, 1 failed"
    assert "  failed\tbad.md\t0 chunks\t-\tbinary content (NUL bytes) in a text file" in text
    assert text[-1] == (
        "s: 6 sources in 1 root: 2 ok, 1 changed, 1 deleted, 1 new, 1 failed. "
        "Bring it up to date with: archivist sync --store s"
    )


def test_sync_reads_every_root_again_with_its_recorded_options(fake_models, home, tmp_path):
    a = write_files(
        tmp_path / "a",
        {"keep.md": "# Keep\n\nKept.", "notes.txt": "Notes.", "code.py": "print('hi')\n"},
    )
    b = write_files(tmp_path / "b", {"b.md": "# B\n\nBee."})
    cli(home, "ingest", str(a), "--store", "s", "--exclude", "*.txt", "--text-ext", ".py",
        "--chunk-size", "400")  # fmt: skip
    cli(home, "ingest", str(b), "--store", "s")
    cli(home, "ingest", str(b), "--store", "other")
    before = texts(home)
    assert sorted(before) == ["a/code.py", "a/keep.md", "b/b.md"]
    (a / "keep.md").write_text("# Keep\n\nKept, and changed.")
    (a / "code.py").unlink()
    write_files(a, {"more.txt": "Still excluded.", "new.md": "# New\n\nNew file."})
    fake_models.clear_requests()
    done = cli(home, "sync", "--store", "s", "--json")
    reports = json.loads(done.stdout)
    assert [
        (r["root"], sorted(s["source"] for s in r["stored"]), r["removed"]) for r in reports
    ] == [
        (str(a.resolve()), ["a/keep.md", "a/new.md"], ["a/code.py"]),
        (str(b.resolve()), [], []),
    ]
    assert reports[0]["splitter"]["chunk_size"] == 400  # the recorded chunk size
    after = texts(home)
    assert sorted(after) == ["a/keep.md", "a/new.md", "b/b.md"]
    assert after["b/b.md"] == before["b/b.md"]
    embedded = [t for r in fake_models.embed_requests() for t in r]
    assert not any("Bee" in t for t in embedded)
    assert set(statuses(home).values()) == {("ok", None)}
    # Nothing changed: nothing read but the disk's listing.
    again = json.loads(cli(home, "sync", "--json").stdout)
    assert {r["store"] for r in again} == {"s", "other"}
    assert all(r["stored"] == [] and r["removed"] == [] for r in again)


def test_sync_keeps_a_missing_roots_sources_and_says_how_to_remove_it(fake_models, home, tmp_path):
    a = write_files(tmp_path / "a", {"one.md": "# One\n\nFirst."})
    b = write_files(tmp_path / "b", {"two.md": "# Two\n\nSecond."})
    cli(home, "ingest", str(a), str(b), "--store", "s")
    (a / "one.md").unlink()
    a.rmdir()
    done = cli(home, "sync", "--store", "s", code=1)
    assert "is missing: its sources are kept" in done.stderr
    assert "archivist delete --store s --root a" in done.stderr
    assert done.stdout == "s b: 0 files stored, 1 unchanged, 0 failed, 0 removed.\n"
    assert sorted(texts(home)) == ["a/one.md", "b/two.md"]
    assert statuses(home)["a/one.md"][0] == "deleted"


def test_delete_root_removes_it_and_its_sources_and_drops_the_labels(fake_models, home, tmp_path):
    a = write_files(tmp_path / "a", {"one.md": "# One\n\nFirst.", "sub/x.md": "# X\n\nEx."})
    b = write_files(tmp_path / "b", {"two.md": "# Two\n\nSecond."})
    cli(home, "ingest", str(a), str(b), "--store", "s")
    refused = cli(home, "delete", "--store", "s", "--root", "a", code=1)
    assert "Add --yes: archivist delete --store s --root a --yes" in refused.stderr
    assert sorted(texts(home)) == ["a/one.md", "a/sub/x.md", "b/two.md"]
    unknown = cli(home, "delete", "--store", "s", "--root", "nowhere", "--yes", code=1)
    assert "has no root 'nowhere'" in unknown.stderr and "a (" in unknown.stderr
    done = json.loads(
        cli(home, "delete", "--store", "s", "--root", str(a), "--yes", "--json").stdout
    )
    assert done["root"] == str(a.resolve()) and done["chunks"] == 2
    assert done["renamed"] == {"b/two.md": "two.md"}
    assert sorted(texts(home)) == ["two.md"]
    assert statuses(home) == {"two.md": ("ok", None)}
    # Ingesting the removed folder again makes it a root again beside the other.
    cli(home, "ingest", str(a), "--store", "s")
    assert sorted(texts(home)) == ["a/one.md", "a/sub/x.md", "b/two.md"]


def test_source_filters_take_a_root_label_a_folder_or_a_file(fake_models, home, tmp_path):
    docs = tmp_path / "docs"
    write_files(docs / "en", {"guide/tents.md": "# Tents\n\nTents keep rain out.",
                              "faq.md": "# FAQ\n\nTents are sold here."})  # fmt: skip
    write_files(docs / "zh", {"guide/tents.md": "# 帐篷\n\nTents 防雨。"})
    cli(home, "ingest", str(docs / "en"), str(docs / "zh"), "--store", "s")

    def found(source):
        done = cli(home, "search", "tents", "--store", "s", "--json", "--source", source)
        return sorted({r["source"] for r in json.loads(done.stdout)})

    assert found("zh") == ["zh/guide/tents.md"]
    assert found("en") == ["en/faq.md", "en/guide/tents.md"]
    assert found("en/guide") == ["en/guide/tents.md"]
    assert found("faq.md") == ["en/faq.md"]
    app = Archivist(Settings(ollama_host=OLLAMA, home=home))
    try:
        docs_found = app.retriever("s", source="zh").invoke("tents")
        assert {d.metadata["source"] for d in docs_found} == {"zh/guide/tents.md"}
        description = app.tool("s").description
        assert "zh/guide/tents.md" in description or "en/faq.md" in description
    finally:
        app.close()


@contextmanager
def watching(home, stores=("s",)):
    app = Archivist(Settings(ollama_host=OLLAMA, home=home))
    lines: list[str] = []
    stop = threading.Event()
    watcher = Watcher(app, list(stores), lines.append, stop, debounce_ms=150, settle_s=0.1)
    thread = threading.Thread(target=watcher.run, daemon=True)
    thread.start()
    assert watcher.ready.wait(10)
    try:
        yield watcher, lines
    finally:
        stop.set()
        thread.join(20)
        app.close()
        assert not thread.is_alive()


def until(predicate, timeout=30.0):
    """Poll until `predicate()` holds (a guard against hanging, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def synced(watcher, batches):
    return until(lambda: watcher.batches >= batches)


def test_watch_follows_edits_renames_deletes_and_a_burst(fake_models, home, tmp_path):
    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha one.", "b.md": "# B\n\nBravo."})
    cli(home, "ingest", str(kb), "--store", "s")
    with watching(home) as (watcher, lines):
        (kb / "a.md").write_text("# A\n\nAlpha two.")
        assert synced(watcher, 1)
        assert texts(home)["a.md"].endswith("Alpha two.")
        assert lines == ["s: updated a.md (1 chunk)"]
        # An editor's save: written aside, then renamed over the file.
        (kb / ".b.md.tmp").write_text("# B\n\nBravo saved by rename.")
        os.replace(kb / ".b.md.tmp", kb / "b.md")
        assert until(lambda: texts(home).get("b.md", "").endswith("saved by rename."))
        assert sorted(texts(home)) == ["a.md", "b.md"]  # never missing one that exists
        (kb / "a.md").unlink()
        assert until(lambda: "a.md" not in texts(home))
        assert until(lambda: "s: removed a.md" in lines)
        # A burst: a checkout writing 1,000 files makes few batches, not 1,000.
        count = watcher.batches
        for n in range(1000):
            (kb / "burst" / f"{n // 100}").mkdir(parents=True, exist_ok=True)
            (kb / "burst" / f"{n // 100}" / f"f{n}.md").write_text(f"# F{n}\n\nFile number {n}.")
        burst = lambda: [x for x in lines if x.startswith("s: new burst/")]  # noqa: E731
        assert until(lambda: len(burst()) == 1000, timeout=120)
        assert watcher.batches - count <= 5
        stored = texts(home)
        assert len(stored) == 1001 and stored["burst/9/f999.md"].endswith("File number 999.")


def test_watch_waits_for_a_file_being_written(fake_models, home, tmp_path):
    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    cli(home, "ingest", str(kb), "--store", "s")
    with watching(home) as (watcher, lines):
        growing = kb / "log.md"
        with growing.open("w") as handle:
            for n in range(12):
                handle.write(f"Line {n} of a file still being written.\n")
                handle.flush()
                time.sleep(0.05)
        assert until(lambda: "Line 11" in texts(home).get("log.md", ""))
        time.sleep(0.5)
        # Stored whole, once it held still: every line, never a torn prefix left behind.
        assert texts(home)["log.md"].count("still being written") == 12
        assert sorted(texts(home)) == ["a.md", "log.md"]


@pytest.mark.parametrize("follow", ["ingest"])
def test_ingest_watch_stops_cleanly_on_ctrl_c(fake_models, home, tmp_path, follow):
    import signal
    import subprocess
    import sys

    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    from fake_ollama import FakeOllama

    with FakeOllama() as fake:
        env = {**os.environ, "OLLAMA_HOST": fake.url, "ARCHIVIST_HOME": str(home)}
        process = subprocess.Popen(
            [sys.executable, "-m", "archivist", "ingest", str(kb), "--store", "s", "--watch"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 60
            line = ""
            while "Watching" not in line and time.monotonic() < deadline:
                line = process.stderr.readline()
            said: list[str] = []
            reader = threading.Thread(target=lambda: said.extend(process.stdout), daemon=True)
            reader.start()
            (kb / "b.md").write_text("# B\n\nBravo.")
            assert until(lambda: "s: new b.md (1 chunk)\n" in said, timeout=60)
            process.send_signal(signal.SIGINT)
            process.wait(timeout=30)
            stderr = process.stderr.read()
        finally:
            process.kill()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "Stopped watching: 1 change synced." in stderr
    assert sorted(texts(home)) == ["a.md", "b.md"]
