"""A home written by the previous release (0.1.0) opens and answers with this one.

tests/data/release-0.1.0-home.tar.xz is the ARCHIVIST_HOME that release made, at commit
68415d3, with `python -m agent ingest examples/shop --store shop_docs --description "policies
of an outdoor shop"` against tests/fake_ollama.py (the same deterministic embeddings as here).
"""

import functools
import json
import tarfile
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, copy_home, run_cli, stored_sparse_vectors, write_files

from archivist.app import Archivist
from archivist.settings import Settings
from archivist.tools import sparse

ARCHIVE = ROOT / "tests" / "data" / "release-0.1.0-home.tar.xz"
# What that home's search gives: its own sparse scheme and its stored vectors, as before
# qdrant-edge's BM25 (the sparse scores are the ones it always printed), ranked by this
# release's fusion (dense weighted by its agreement with BM25 too) and with one passage per
# source first (a second refund.md chunk gives way to another page).
RELEASED_RESULTS = {
    # Fused page by page (`fuse_zscore`): a page's best chunk scores the page's best z-score
    # in each ranking, and a page named in the question's words gains (the refund page's
    # `Refund Policy`, half of whose terms the question holds: 2 × 0.5).
    "hybrid": [
        ("contact.md", "d1bff4ec-7359-5413-ae5d-c0b58ab636ed", 4.375),
        ("refund.md", "6ab38313-26ce-5156-88f2-b4a960f70b00", 3.131),
        ("payment.md", "5cba8b8e-6fbe-575c-bc9f-500d84a20b7b", 1.54),
        ("product-care.md", "bd3aa27c-c745-5df6-9a5f-234557967589", 1.494),
        ("privacy.md", "0105b472-7ff0-564d-85f2-c13424914e62", 1.311),
    ],
    "sparse": [
        ("contact.md", "d1bff4ec-7359-5413-ae5d-c0b58ab636ed", 6.732),
        ("payment.md", "5cba8b8e-6fbe-575c-bc9f-500d84a20b7b", 5.939),
        ("product-care.md", "bd3aa27c-c745-5df6-9a5f-234557967589", 5.691),
        ("refund.md", "7d5f12c3-afd8-5fa3-bd8d-f3d97e87c836", 5.566),
        ("shipping.md", "9c95fe80-6337-562d-99b5-8b6922ce0950", 4.766),
    ],
}


def released_home(home):
    """The released home, in `home` (a copy of the archive's contents, extracted once)."""
    return copy_home(_extracted(), home)


@functools.cache
def _extracted() -> Path:
    # Extracted once for the test process: the archive holds ~190 MB of store files, zeros
    # for the most part, which the copy keeps as holes.
    kept = tempfile.TemporaryDirectory(prefix="release-0.1.0-")  # removed as Python exits
    _KEPT.append(kept)
    with tempfile.TemporaryDirectory() as unpacked:
        with tarfile.open(ARCHIVE) as archive:
            archive.extractall(unpacked, filter="data")
        return copy_home(Path(unpacked), Path(kept.name))


_KEPT: list[tempfile.TemporaryDirectory] = []


QUESTION = "How many days do I have to ask for a refund?"


def search(query: str, mode: str, **where) -> list[dict]:
    found = run_cli("search", query, "--store", "shop_docs", "--json", "--mode", mode, **where)
    assert found.returncode == 0, found.stderr
    return json.loads(found.stdout)


def test_a_store_of_the_previous_release_is_listed_searched_and_answers(ollama, home):
    released_home(home)
    stores = run_cli("stores", "--json", ollama_url=ollama.url, home=home)
    assert stores.returncode == 0, stores.stderr
    [listed] = json.loads(stores.stdout)
    assert listed["store"] == "shop_docs" and listed["chunks"] == 58
    assert listed["description"] == "policies of an outdoor shop"
    assert listed["sparse"] == sparse.LEGACY_SCHEME
    # The listing names the scheme, and says once how to upgrade the store's keyword search.
    text = run_cli("stores", ollama_url=ollama.url, home=home)
    assert text.stdout.splitlines()[1].split("\t")[3] == sparse.LEGACY_SCHEME
    assert text.stderr.count("--reindex") == 1
    assert "archivist ingest PATH --store shop_docs --reindex` upgrades" in text.stderr
    doctor = run_cli("doctor", ollama_url=ollama.url, home=home)
    assert doctor.returncode == 0, doctor.stdout
    assert (
        f"! Store 'shop_docs' keeps keyword vectors of the older scheme '{sparse.LEGACY_SCHEME}'"
    ) in doctor.stdout

    for mode, expected in RELEASED_RESULTS.items():
        found = run_cli(
            "search", QUESTION, "--store", "shop_docs", "--json", "--mode", mode,
            ollama_url=ollama.url, home=home,
        )  # fmt: skip
        assert found.returncode == 0, found.stderr
        results = json.loads(found.stdout)
        assert [(r["source"], r["chunk_id"], round(r["score"], 3)) for r in results] == expected
        assert "--reindex" not in found.stderr  # the hint is for where the store is described
    embeds_before_ask = len(ollama.requests_to("/api/embed"))

    asked = run_cli(
        "ask", QUESTION, "--store", "shop_docs", "--json", ollama_url=ollama.url, home=home
    )
    assert asked.returncode == 0, asked.stderr
    turn = json.loads(asked.stdout)
    assert turn["tool_calls"][0]["name"] == "search_shop_docs"
    assert turn["tool_calls"][0]["results"] and turn["citations"]
    # Answering embedded the query only: nothing stored was embedded again.
    asked_embeds = ollama.requests_to("/api/embed")[embeds_before_ask:]
    assert asked_embeds and all(len(r["input"]) == 1 for r in asked_embeds)


def test_a_released_store_is_listed_by_content_and_read_back_as_its_files(ollama, home):
    """Its chunks' metadata is stored as it was then (a nested payload, not the JSON text
    stores keep now): `sources --contains` counts and `read` lays out the same text."""
    released_home(home)
    listed = run_cli(
        "sources", "--store", "shop_docs", "--contains", "Refund", "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stderr
    counts = {e["source"]: e["count"] for e in json.loads(listed.stdout)}
    assert "refund.md" in counts
    for name in sorted(p.name for p in (ROOT / "examples" / "shop").glob("*.md")):
        read = run_cli(
            "read", "--store", "shop_docs", name, "--json", ollama_url=ollama.url, home=home
        )
        assert read.returncode == 0, read.stderr
        lines = json.loads(read.stdout)["lines"]
        text = "\n".join(line["text"] for line in lines)
        assert counts.get(name, 0) == text.lower().count("refund"), name
        on_disk = (ROOT / "examples" / "shop" / name).read_text(encoding="utf-8").split("\n")
        assert all(on_disk[line["n"] - 1].rstrip() == line["text"].rstrip() for line in lines)


def test_re_ingesting_the_same_files_into_a_released_store_embeds_nothing(ollama, home):
    released_home(home)
    done = run_cli(
        "ingest", str(ROOT / "examples" / "shop"), "--store", "shop_docs", "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert len(report["unchanged"]) == 10 and report["stored"] == []
    embedded = [r for r in ollama.requests_to("/api/embed") if len(r["input"]) > 1]
    assert embedded == []


def test_a_file_ingested_into_a_released_store_gets_keyword_vectors_of_its_old_scheme(
    ollama, home, tmp_path
):
    released_home(home)
    settings = Settings(ollama_host=ollama.url, home=home)
    app = Archivist(settings)
    before = app.store("shop_docs").fingerprint
    app.close()
    note = "Gift cards from Northwind never expire and can pay for repairs of Kestrel stoves."
    extra = write_files(tmp_path / "extra", {"gift-cards.md": note})
    done = run_cli("ingest", str(extra), "--store", "shop_docs", ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr

    app = Archivist(settings)
    try:
        store = app.store("shop_docs")
        assert store.fingerprint == before
        [(text, (indices, values))] = stored_sparse_vectors(store, "gift-cards.md").items()
        assert text == note
        expected = sparse.encoder(sparse.LEGACY_SCHEME).document(note)
        assert indices == expected[0] and values == pytest.approx(expected[1], rel=1e-6)
        assert stored_sparse_vectors(store, "refund.md")  # the old chunks are still there
    finally:
        app.close()
    # Its query is made by the old scheme too: it finds the new file by its words.
    [first, *_] = search("Kestrel stove repairs", "sparse", ollama_url=ollama.url, home=home)
    assert first["source"] == "gift-cards.md"


def test_reindexing_a_released_store_switches_it_to_the_new_scheme(ollama, home, tmp_path):
    released_home(home)
    done = run_cli(
        "ingest", str(ROOT / "examples" / "shop"), "--store", "shop_docs", "--reindex",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "shop_docs (rebuilt for the current embedding model and BM25 scheme)" in done.stdout

    app = Archivist(Settings(ollama_host=ollama.url, home=home))
    try:
        store = app.store("shop_docs")
        assert store.sparse_scheme == sparse.DEFAULT_SCHEME
        assert store.description == "policies of an outdoor shop"
        vectors = stored_sparse_vectors(store)
        edge = sparse.encoder(sparse.DEFAULT_SCHEME)
        assert len(vectors) > 50
        assert all(vector == edge.document(text) for text, vector in vectors.items())
    finally:
        app.close()
    listed = run_cli("stores", ollama_url=ollama.url, home=home)
    assert listed.stdout.splitlines()[1].split("\t")[3] == sparse.DEFAULT_SCHEME
    assert listed.stderr == ""
    # It now searches exactly as a store this release ingests from the same files.
    fresh = tmp_path / "fresh"
    ingested = run_cli(
        "ingest", str(ROOT / "examples" / "shop"), "--store", "shop_docs",
        ollama_url=ollama.url, home=fresh,
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    for mode in RELEASED_RESULTS:
        reindexed = search(QUESTION, mode, ollama_url=ollama.url, home=home)
        new = search(QUESTION, mode, ollama_url=ollama.url, home=fresh)
        assert reindexed == new and len(new) == 5


def test_a_released_store_copied_to_another_qdrant_keeps_its_scheme_and_results(
    ollama, home, tmp_path
):
    released_home(home)
    backup = tmp_path / "backup"
    done = run_cli("migrate", "--to-home", str(backup), ollama_url=ollama.url, home=home)
    assert done.returncode == 0, done.stderr
    [listed] = json.loads(run_cli("stores", "--json", ollama_url=ollama.url, home=backup).stdout)
    assert listed["sparse"] == sparse.LEGACY_SCHEME
    for mode, expected in RELEASED_RESULTS.items():
        found = search(QUESTION, mode, ollama_url=ollama.url, home=backup)
        assert [(r["source"], r["chunk_id"], round(r["score"], 3)) for r in found] == expected
