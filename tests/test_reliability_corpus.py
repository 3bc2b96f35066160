"""A hostile folder: every kind of bad file next to good ones, ingested through the CLI.

tests/test_ingest_cli.py covers corrupt PDFs, damaged UTF-8, empty files, a binary `.md` and
a file just over the size limit; this corpus adds everything else a real folder can hold.
"""

import io
import json
import os

from conftest import run_cli, write_files
from pypdf import PdfReader, PdfWriter
from samples import make_pdf

from archivist.tools.store import KnowledgeStore, connect

SECRET = "Outside text that must never be read"


def encrypted_pdf() -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["Locked page."]]))))
    writer.encrypt("s3cret", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def hostile_corpus(tmp_path):
    """Write the corpus; return (folder, {bad source: reason}, note on what was left out)."""
    outside = write_files(tmp_path / "outside", {"secret.md": f"# Secret\n\n{SECRET}."})
    root = write_files(
        tmp_path / "kb",
        {
            "good.md": "# Good\n\nTents keep the rain out.",
            "utf16.txt": "Kayaks float on calm lakes.".encode("utf-16"),  # with its BOM
            "long-line.txt": "lantern" * 30_000 + "\n" + "Paddles are sold in pairs. " * 200,
            "blank.md": "  \n\t\n   \n",
            "nul.txt": b"Some text\0with a NUL byte in it",
            "deep.json": "[" * 100_000 + "]" * 100_000,
            "cut.json": '[{"id": "a", "text": "half a rec',
            "ragged.csv": "id,name,text\n1,Lamp,A lamp.\n2,Stove,A stove.,loose,values\n",
            "scripts.html": "<html><head><script>steal()</script></head>"
            "<body><script>x()</script><style>p {}</style></body></html>",
            "locked.pdf": encrypted_pdf(),
        },
    )
    with (root / "giant.txt").open("wb") as handle:  # 1 GB, sparse: nothing is written
        handle.truncate(2**30)
    (root / "loop.md").symlink_to("loop.md")
    (root / "escape.md").symlink_to(outside / "secret.md")
    (root / "elsewhere").symlink_to(outside, target_is_directory=True)
    (root / "alias.md").symlink_to("good.md")  # a link inside the folder is followed
    os.mkfifo(root / "pipe.md")  # reading it would wait forever
    bad = {
        "nul.txt": "binary content (NUL bytes) in a text file",
        "deep.json": "nested too deeply to read",
        "cut.json": "invalid JSON at line 1, column 22",
        "ragged.csv": "row 3 has 5 fields, the header 3",
        "locked.pdf": "encrypted PDF (needs a password)",
        "giant.txt": "larger than the 50 MB limit (1024 MB)",
        "loop.md": "symbolic link loop",
        "escape.md": "symbolic link to outside the folder, not followed (ingest its target "
        "directly)",
        "elsewhere": "symbolic link to outside the folder, not followed (ingest its target "
        "directly)",
        "pipe.md": "not a regular file (a pipe, socket or device)",
    }
    note = ""
    if os.geteuid() == 0:
        # chmod 000 does not stop root: the case can only be shown as another user.
        note = "unreadable-file case left out: the tests run as root, who can read any file"
    else:
        write_files(root, {"unreadable.md": "# Hidden\n\nYou cannot read me."})
        (root / "unreadable.md").chmod(0)
        bad["unreadable.md"] = "cannot read: Permission denied"
    return root, bad, note


def test_a_hostile_folder_stores_the_good_files_and_reports_each_bad_one(ollama, home, tmp_path):
    root, bad, note = hostile_corpus(tmp_path)
    if note:
        print(note)
    done = run_cli("ingest", str(root), "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    head = f"kb: 4 files stored, 0 unchanged, {len(bad)} failed, 2 skipped, 0 removed;"
    assert lines[0].startswith(head)
    # Files without text are not documents: skipped, with their reason, not failed.
    assert "  2 skipped: no text in the file" in lines
    failed = dict(line.split(": ", 2)[1:] for line in lines if line.startswith("  failed: "))
    assert failed == bad

    embedded = [t for body in ollama.requests_to("/api/embed") for t in body["input"]]
    assert not any(SECRET in text or "Locked page" in text for text in embedded)
    assert any("lantern" in text for text in embedded)

    client = connect(home / "edge")
    try:
        sources = KnowledgeStore(client, "kb").sources()
        assert sorted(sources) == ["alias.md", "good.md", "long-line.txt", "utf16.txt"]
        assert all(info.complete for info in sources.values())
        texts = {c["source"]: c["text"] for c in KnowledgeStore(client, "kb").chunks()}
        assert texts["utf16.txt"] == "Kayaks float on calm lakes."
    finally:
        client.close()

    again = run_cli(
        "ingest", str(root), "--store", "kb", "--json", ollama_url=ollama.url, home=home
    )
    assert again.returncode == 1 and "Traceback" not in again.stderr
    report = json.loads(again.stdout)
    assert sorted(report["unchanged"]) == ["alias.md", "good.md", "long-line.txt", "utf16.txt"]
    assert {f["source"]: f["reason"] for f in report["failed"]} == bad
    assert {s["source"] for s in report["skipped"]} == {"blank.md", "scripts.html"}
