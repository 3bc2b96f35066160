"""Real document trees: a docs folder as projects have it, hostile files, prune of every
shape of source, a chat model as embedder, and versioned pages in one result list."""

import io
import json
import os
import re
import subprocess
import sys
import zipfile

import pytest
from conftest import run_cli, write_files
from samples import broken_png_reason, make_docx, make_pdf

from archivist.ingest.discovery import FolderRules, discover, source_name
from archivist.ingest.loaders import ocr
from archivist.tools.errors import ArchivistError

INTRO = "# Welcome\n\nNorthwind Trails maps every hiking route in the northern parks."


def docs_folder(root):
    """A documentation project: versioned pages, config, images, build output, caches."""
    return write_files(
        root,
        {
            ".gitignore": "build/\n*.log\n",
            ".archivistignore": "drafts/\n",
            ".env": "SECRET=1\n",
            "docs/intro.md": INTRO,
            "docs/install.mdx": "---\ntitle: Install\n---\nimport X from './x';\n\n# Install"
            "\n\n<Note>Download the app for free.</Note>\n",
            "docs/api.rst": "API\n===\n\nThe routes endpoint lists routes.\n",
            "docs/setup.py": "print('set up')\n",
            "docs/trip.log": "a log line\n",
            "versioned_docs/version-1.0/intro.md": INTRO,
            "versioned_docs/version-2.0/intro.md": INTRO,
            "package.json": '{"name": "northwind-docs", "version": "2.0.0"}',
            "static/img/logo.png": b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR",
            "build/index.html": "<html><body><p>Built page.</p></body></html>",
            "drafts/secret-plans.md": "# Not ready",
            ".docusaurus/cache.md": "# cache",
            "node_modules/left-pad/README.md": "# left-pad",
            "venv/pyvenv.cfg": "home = /usr/bin\n",
            "venv/lib/notes.md": "# inside a virtualenv",
        },
    )


def test_discovery_leaves_out_what_a_docs_folder_does_not_mean_and_says_why(tmp_path):
    root = docs_folder(tmp_path / "site")
    files, failed, skipped = discover([root])
    # With the ocr extra an image is a document to read (and skipped when loaded, if broken);
    # without it, discovery skips it as a binary file.
    image = ["static/img/logo.png"] if ocr.available() else []
    assert sorted(f.source for f in files) == [
        "docs/api.rst",
        "docs/install.mdx",
        "docs/intro.md",
        "package.json",
        *image,
        "versioned_docs/version-1.0/intro.md",
        "versioned_docs/version-2.0/intro.md",
    ]
    assert failed == []
    reasons = {s.source: s.reason for s in skipped}
    assert reasons == {
        ".archivistignore": "hidden file",
        ".docusaurus/": "hidden folder",
        ".env": "hidden file",
        ".gitignore": "hidden file",
        "build/": "ignored by .gitignore",
        "docs/setup.py": "unsupported text type '.py' (add --text-ext .py to ingest it as text)",
        "docs/trip.log": "ignored by .gitignore",
        "drafts/": "ignored by .archivistignore",
        "node_modules/": "dependency folder (node_modules, a virtualenv…)",
        **({} if image else {"static/img/logo.png": broken_png_reason()}),
        "venv/": "dependency folder (node_modules, a virtualenv…)",
    }


def test_include_exclude_and_nested_ignore_files(tmp_path):
    root = write_files(
        tmp_path / "kb",
        {
            "a/keep.md": "# keep",
            "a/skip.md": "# skip",
            "a/.gitignore": "*.md\n!keep.md\n",
            "b/guide.md": "# guide",
            "b/old/guide.md": "# old",
            "c.txt": "text",
        },
    )
    files, _, skipped = discover([root])
    assert sorted(f.source for f in files) == ["a/keep.md", "b/guide.md", "b/old/guide.md", "c.txt"]
    assert {"source": "a/skip.md", "reason": "ignored by a/.gitignore"} in [
        s.to_dict() for s in skipped
    ]
    rules = FolderRules(include=("*.md",), exclude=("old/",))
    files, _, skipped = discover([root], rules=rules)
    assert sorted(f.source for f in files) == ["a/keep.md", "b/guide.md"]
    reasons = {s.source: s.reason for s in skipped}
    assert reasons["b/old/"] == "excluded by --exclude"
    assert reasons["c.txt"] == "not matched by --include"


def test_a_docs_folder_exits_0_with_the_skips_grouped_and_listed(ollama, home, tmp_path):
    root = docs_folder(tmp_path / "site")
    done = run_cli("ingest", str(root), "--store", "site", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    head = "site: 5 files stored, 0 unchanged, 0 failed, 12 skipped, 0 removed;"
    assert lines[0].startswith(head)
    assert lines[1:] == [
        "  3 skipped: hidden file",
        "  2 skipped: dependency folder (node_modules, a virtualenv…)",
        "  2 skipped: ignored by .gitignore",
        "  1 skipped: JSON without a text field (text, content or body): a config file? Name "
        "the field with --text-field to ingest it",
        f"  1 skipped: {broken_png_reason()}",
        "  1 skipped: hidden folder",
        "  1 skipped: ignored by .archivistignore",
        "  1 skipped: unsupported text type '.py' (add --text-ext .py to ingest it as text)",
        "  (--verbose lists the skipped files)",
    ]
    again = run_cli(
        "ingest", str(root), "--store", "site", "--text-ext", ".py", "--verbose",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert lines[0].startswith("site: 1 file stored, 5 unchanged, 0 failed, 11 skipped, 0 removed;")
    assert "  1 skipped: ignored by .archivistignore" in lines
    assert lines[lines.index("  1 skipped: ignored by .archivistignore") + 1] == "    drafts/"
    assert "    node_modules/" in lines and "    venv/" in lines

    # Versioned pages: one passage, the other copies named in its metadata.
    found = run_cli(
        "search", "hiking routes northern parks", "--store", "site", "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    results = json.loads(found.stdout)
    texts = [r["text"] for r in results]
    assert len(texts) == len(set(texts))
    [welcome] = [r for r in results if "hiking route" in r["text"]]
    copies = {welcome["source"], *welcome["metadata"]["also_in"]}
    assert copies == {
        "docs/intro.md",
        "versioned_docs/version-1.0/intro.md",
        "versioned_docs/version-2.0/intro.md",
    }


def hostile_folder(root):
    """Files that each crash a naive ingest of their folder: one bad file must fail alone."""
    root.mkdir(parents=True)
    good = make_docx(root / "good.docx").read_bytes()
    write_files(root, {"notes.md": "# Notes\n\nGood notes about tents."})
    # A name that is not UTF-8, as old archives and Windows shares have.
    with open(os.path.join(os.fsencode(root), b"caf\xe9.md"), "wb") as handle:
        handle.write(b"# Caf\xc3\xa9\n\nThe caf\xc3\xa9 opens at eight.")
    original = zipfile.ZipFile(io.BytesIO(good))

    def docx_with(name, document_xml):
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as package:
            for info in original.infolist():
                data = original.read(info.filename)
                is_body = info.filename == "word/document.xml"
                package.writestr(info.filename, document_xml if is_body else data)
        (root / name).write_bytes(out.getvalue())

    docx_with("malformed.docx", original.read("word/document.xml")[:-300])
    entity = b'<!ENTITY a0 "ha">' + b"".join(
        f'<!ENTITY a{i} "{f"&a{i - 1};" * 10}">'.encode() for i in range(1, 9)
    )
    docx_with(
        "entities.docx",
        b'<?xml version="1.0"?><!DOCTYPE d [' + entity + b']><w:document xmlns:w="http://schemas'
        b'.openxmlformats.org/wordprocessingml/2006/main"><w:body><w:p><w:r><w:t>&a8;</w:t>'
        b"</w:r></w:p></w:body></w:document>",
    )
    info = original.getinfo("word/document.xml")
    data_at = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    flipped = bytearray(good)
    for i in range(data_at + 10, data_at + 40):
        flipped[i] ^= 0x5A
    (root / "deflate.docx").write_bytes(bytes(flipped))
    method = bytearray(good)
    method[info.header_offset + 8 : info.header_offset + 10] = (99).to_bytes(2, "little")
    at = method.find(b"PK\x01\x02")
    while at != -1:
        length = int.from_bytes(method[at + 28 : at + 30], "little")
        if method[at + 46 : at + 46 + length] == b"word/document.xml":
            method[at + 10 : at + 12] = (99).to_bytes(2, "little")
        at = method.find(b"PK\x01\x02", at + 4)
    (root / "method.docx").write_bytes(bytes(method))
    pdf = make_pdf([["Filtered text."]]).replace(b"<< /Length", b"<< /Filter /FooDecode /Length")
    (root / "filter.pdf").write_bytes(pdf)
    return root


def test_a_hostile_folder_stores_every_good_file_and_lists_each_bad_one(ollama, home, tmp_path):
    root = hostile_folder(tmp_path / "hostile")
    # The CLI in a process that reports its own peak memory as it exits.
    measured = (
        "import atexit, re, sys; atexit.register(lambda: sys.stderr.write('maxrss_kb=' + "
        "re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1] + '\\n')); "
        "sys.argv[0] = 'archivist'; from archivist.cli import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", measured, "ingest", str(root), "--store", "h", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)},
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert sorted(s["source"] for s in report["stored"]) == ["caf\\xe9.md", "good.docx", "notes.md"]
    failed = {f["source"]: f["reason"] for f in report["failed"]}
    assert failed["malformed.docx"].startswith("damaged DOCX")
    assert "amplification" in failed["entities.docx"]
    assert failed["deflate.docx"].startswith("damaged DOCX: Error -3 while decompressing")
    assert failed["method.docx"] == "damaged DOCX: That compression method is not supported"
    assert failed["filter.pdf"] == (
        "unreadable PDF (NotImplementedError: Unsupported filter /FooDecode)"
    )
    assert len(failed) == 5
    # Within the 1 GB the rest of the ingest meets. The peak is this program's own (VmHWM, in
    # KB): ru_maxrss would count the test process it was started from, kept across exec.
    [peak] = re.findall(r"maxrss_kb=(\d+)", done.stderr)
    assert int(peak) < 1024 * 1024
    names = run_cli("sources", "--store", "h", "--json", ollama_url=ollama.url, home=home)
    assert "caf\\xe9.md" in {s["source"] for s in json.loads(names.stdout)}


def test_a_name_that_is_not_utf8_is_escaped():
    assert source_name("docs/caf\udce9.md") == "docs/caf\\xe9.md"
    assert source_name("docs/café.md") == "docs/café.md"


PRODUCTS = [
    {"id": "p1", "text": "Summit tent, four seasons."},
    {"id": "p2", "text": "Meadow tent, summer only."},
    {"text": "A record without an id."},
]


def test_prune_keeps_unchanged_sources_of_every_shape(archivist, tmp_path):
    root = write_files(
        tmp_path / "kb",
        {
            "guide.md": "# Guide\n\nThe guide.",
            "mixed.json": json.dumps(PRODUCTS),  # `mixed.json` and `mixed.json#p1`, `#p2`
            "keyed.jsonl": '{"id": "k1", "text": "First."}\n{"id": "k2", "text": "Second."}\n',
            "rows.csv": "id,text\nr1,Row one.\nr2,Row two.\n",
            "plain.csv": "name,text\nlamp,Bright.\n",
            "odd#name.json": json.dumps([{"id": "x", "text": "A hash in the file name."}]),
            "gone.md": "# Gone\n\nTo be deleted.",
            "later-broken.md": "# Broken later\n\nFine today.",
        },
    )
    (root / "manual.pdf").write_bytes(make_pdf([["Page one."], ["Page two."]]))
    first = archivist.ingest([str(root)], "kb")
    before = set(archivist.store("kb").sources())
    assert {"mixed.json", "mixed.json#p1", "mixed.json#p2", "odd#name.json#x"} <= before
    assert len(before) == len(first.stored) == 13

    (root / "gone.md").unlink()
    (root / "later-broken.md").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0binary now")
    report = archivist.ingest([str(root)], "kb", prune=True)
    assert report.removed == ["gone.md"]
    assert set(archivist.store("kb").sources()) == before - {"gone.md"}
    assert [f["source"] for f in report.failed] == ["later-broken.md"]


def test_a_chat_model_is_refused_as_the_embedder(ollama, home, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nText."})
    done = run_cli(
        "ingest", str(root), "--store", "kb", "--embed-model", "qwen2.5:3b",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert "Error: 'qwen2.5:3b' is not an embedding model" in done.stderr
    assert "--embed-model nomic-embed-text" in done.stderr
    assert "--allow-chat-embedder" in done.stderr
    assert ollama.requests_to("/api/embed") == []


def test_the_chat_embedder_override_embeds_with_it(archivist, ollama, tmp_path):
    from archivist.app import Archivist

    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nText."})
    chat_embedder = Archivist(archivist.settings.with_overrides(embed_model="qwen2.5:3b"))
    with pytest.raises(ArchivistError, match="not an embedding model"):
        chat_embedder.ingest([str(root)], "kb")
    ollama.clear_requests()
    # The fake, like an Ollama without embeddings for that model, refuses: the request was sent.
    with pytest.raises(ArchivistError):
        chat_embedder.ingest([str(root)], "kb", allow_chat_embedder=True)
    assert [r["model"] for r in ollama.requests_to("/api/embed")][:1] == ["qwen2.5:3b"]
    chat_embedder.close()
