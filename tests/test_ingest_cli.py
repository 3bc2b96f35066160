"""`archivist ingest` as a user runs it: flags, reports, and a corpus with broken files."""

import json
import os
import re

import pytest
from conftest import run_cli, write_files
from samples import broken_png_reason, make_docx, make_pdf

from archivist.ingest.loaders import MAX_FILE_BYTES
from archivist.tools.errors import ArchivistError


def broken_corpus(root):
    write_files(
        root,
        {
            "good.md": "# Good\n\nA good Markdown file.",
            "latin1.txt": "Le café coûte trois euros à la gare, très cher.".encode("cp1252"),
            "records.jsonl": '{"id": "r1", "text": "A good record."}\n',
            "damaged.txt": "配送需要十个工作日。".encode() + b"\xff\xfe" + "关税。".encode(),
            "empty.md": "",
            "binary.md": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0",
            "logo.png": b"\x89PNG\r\n\x1a\n\0\0",
        },
    )
    (root / "handbook.pdf").write_bytes(make_pdf([["A good PDF page."]]))
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + os.urandom(3000))
    make_docx(root / "warranty.docx")
    with (root / "huge.txt").open("wb") as handle:  # sparse: nothing is written
        handle.truncate(MAX_FILE_BYTES + 1)
    return root


def test_a_broken_corpus_stores_every_good_file_and_lists_each_bad_one(ollama, home, tmp_path):
    root = broken_corpus(tmp_path / "kb")
    done = run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("kb: 5 files stored, 0 unchanged, 4 failed, 2 skipped, 0 removed;")
    assert lines[1:4] == [
        f"  1 skipped: {broken_png_reason()}",
        "  1 skipped: empty file",
        "  (--verbose lists the skipped files)",
    ]
    failed = {
        line.split(": ", 2)[1]: line.split(": ", 2)[2]
        for line in lines
        if line.startswith("  failed: ")
    }
    assert set(failed) == {"binary.md", "corrupt.pdf", "damaged.txt", "huge.txt"}
    assert failed["binary.md"] == "binary content (NUL bytes) in a text file"
    assert failed["corrupt.pdf"].startswith("damaged PDF")
    assert failed["damaged.txt"] == "damaged UTF-8 text: invalid byte sequence at byte 30"
    assert failed["huge.txt"] == "larger than the 50 MB limit (50 MB)"

    again = run_cli(
        "ingest", str(root), "--store", "kb", "--json", ollama_url=ollama.url, home=home
    )
    assert again.returncode == 1
    report = json.loads(again.stdout)
    assert sorted(report["unchanged"]) == [
        "good.md",
        "handbook.pdf",
        "latin1.txt",
        "records.jsonl#r1",
        "warranty.docx",
    ]
    assert report["stored"] == [] and report["chunks_embedded"] == 0
    assert sorted(f["source"] for f in report["failed"]) == sorted(failed)
    assert sorted(report["skipped"], key=lambda s: s["source"]) == [
        {"source": "empty.md", "reason": "empty file"},
        {"source": "logo.png", "reason": broken_png_reason()},
    ]


def test_ingest_flags_reach_the_splitter_the_embedder_and_the_record_loader(ollama, home, tmp_path):
    root = write_files(
        tmp_path / "kb",
        {
            "long.md": "\n\n".join(f"Paragraph {i}. " + "word " * 30 for i in range(6)),
            "items.csv": "sku,name,blurb\nA1,Lamp,Bright light.\nA2,Stove,Cooks fast.\n",
        },
    )
    args = ["--chunk-size", "200", "--chunk-overlap", "0", "--batch-size", "2"]
    args += ["--concurrency", "1", "--text-field", "blurb", "--id-field", "sku", "--json"]
    done = run_cli("ingest", str(root), "--store", "kb", *args, ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["splitter"] == {"chunk_size": 200, "chunk_overlap": 0}
    assert sorted(s["source"] for s in report["stored"]) == [
        "items.csv#A1",
        "items.csv#A2",
        "long.md",
    ]
    bodies = ollama.requests_to("/api/embed")[1:]
    assert all(len(b["input"]) <= 2 for b in bodies)
    texts = [t for b in bodies for t in b["input"]]
    assert "search_document: Bright light." in texts
    assert sum(len(b["input"]) for b in bodies) == report["chunks_embedded"]
    # Progress goes to stderr only; stdout is the one JSON document.
    assert done.stdout.strip().startswith("{") and done.stdout.strip().endswith("}")

    too_big = run_cli(
        "ingest",
        str(root),
        "--store",
        "kb",
        "--chunk-size",
        "99999",
        ollama_url=ollama.url,
        home=home,
    )
    assert too_big.returncode == 1
    assert "--chunk-size 99999 is too large for nomic-embed-text" in too_big.stderr
    assert "Traceback" not in too_big.stderr


def test_ingest_without_ollama_stops_cleanly(home, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    done = run_cli("ingest", str(root), "--store", "kb", ollama_url="http://127.0.0.1:9", home=home)
    assert done.returncode == 1
    assert "Cannot reach Ollama" in done.stderr and "Traceback" not in done.stderr


def test_include_patterns_that_match_nothing_stop_the_run_and_create_no_store(
    ollama, home, tmp_path
):
    root = write_files(
        tmp_path / "components",
        {"button/index.en-US.md": "# Button\n\nPress it.", "form/index.en-US.md": "# Form"},
    )

    def ingest(store, *patterns):
        options = [arg for p in patterns for arg in ("--include", p)]
        return run_cli(
            "ingest", str(root), "--store", store, *options, ollama_url=ollama.url, home=home
        )

    # Written from the folder's parent: matches nothing inside it.
    done = ingest("x", "components/button/index.en-US.md")
    assert done.returncode == 1 and done.stdout == ""
    assert (
        f"Error: --include 'components/button/index.en-US.md' matched no file in {root}: the "
        "patterns are relative to the folder ingested. Nothing was stored.\n"
        "Write them from inside it: --include 'button/index.en-US.md', or start one with '**/' "
        "to match at any depth.\n"
    ) in done.stderr
    stores = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=home).stdout)
    assert stores == []  # no empty store left behind
    # Into a store that exists: refused too, and its roots are left as they were.
    assert ingest("x", "button/*.md").returncode == 0
    before = run_cli("sources", "--store", "x", "--json", ollama_url=ollama.url, home=home)
    assert ingest("x", "*.txt").returncode == 1
    after = run_cli("sources", "--store", "x", "--json", ollama_url=ollama.url, home=home)
    assert after.stdout == before.stdout
    assert [s["source"] for s in json.loads(after.stdout)] == ["button/index.en-US.md"]
    # The patterns the root records, once they match nothing on disk: not refused as a typo,
    # but a root that now lists nothing keeps its sources until `sync --prune` says so.
    (root / "button" / "index.en-US.md").unlink()
    synced = run_cli("sync", "--store", "x", ollama_url=ollama.url, home=home)
    assert synced.returncode == 1 and "matched no file" not in synced.stderr + synced.stdout
    assert "lists no files now: its 1 source is kept" in synced.stdout
    pruned = run_cli("sync", "--store", "x", "--prune", ollama_url=ollama.url, home=home)
    assert pruned.returncode == 0, pruned.stderr
    after = run_cli("sources", "--store", "x", "--json", ollama_url=ollama.url, home=home)
    assert json.loads(after.stdout) == []


@pytest.mark.parametrize("stop", ["ctrl-c", "ollama gone"])
def test_sources_after_a_stopped_ingest_show_the_half_stored_one_and_how_to_finish(
    archivist, ollama, home, tmp_path, stop
):
    from archivist.ingest.embedder import EmbedSettings
    from archivist.tools.progress import Embedded

    long = "\n\n".join(f"Section {i}. " + "Tents and boots and lamps. " * 12 for i in range(5))
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "b.md": long})
    # Two chunks a request, one at a time: [a0, b0] is stored, and the run stops with b.md
    # stored in part: by Ctrl-C once b.md's first chunk is, or by Ollama failing after the
    # probe, [a0, b0] and [b1, b2].
    fast = EmbedSettings(batch_size=2, concurrency=1, attempts=1, backoff=0.01)

    def ctrl_c(event):
        if isinstance(event, Embedded) and event.source == "b.md":
            raise KeyboardInterrupt

    if stop == "ollama gone":
        ollama.fail("/api/embed", 500, "llama runner process has terminated", 1, 3)
    with pytest.raises(KeyboardInterrupt if stop == "ctrl-c" else ArchivistError):
        archivist.ingest(
            [str(root)], "kb", embed=fast, chunk_size=200, chunk_overlap=0,
            on_progress=ctrl_c if stop == "ctrl-c" else None,
        )  # fmt: skip
    archivist.close()
    done = run_cli("sources", "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith("  ok\ta.md\t1 chunk\t")
    assert lines[2].startswith("  incomplete\tb.md\t")
    assert re.search(r"\tstored in part \(\d+ of \d+ chunks\): its ingest was stopped$", lines[2])
    assert lines[-1] == (
        "kb: 2 sources in 1 root: 1 ok, 1 incomplete. Finish the stopped ingest with: "
        "archivist sync --store kb"
    )
    listed = json.loads(
        run_cli("sources", "--store", "kb", "--json", ollama_url=ollama.url, home=home).stdout
    )
    assert [(s["source"], s["status"], s["complete"]) for s in listed] == [
        ("a.md", "ok", True), ("b.md", "incomplete", False)
    ]  # fmt: skip
    # The command it names finishes it.
    assert run_cli("sync", "--store", "kb", ollama_url=ollama.url, home=home).returncode == 0
    done = run_cli("sources", "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.stdout.splitlines()[-1] == "kb: 2 sources in 1 root: 2 ok"
