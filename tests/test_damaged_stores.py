"""A store whose files were damaged (a settings file emptied or cut short, a segment's state,
the WAL's index, the id tracker or the vectors changed, the shard's folder deleted): every
command names the damage and its repair, never a traceback; the other stores keep working;
`doctor --repair` sets the store aside and ingesting its sources builds it anew."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import copy_home, run_cli, write_files
from fake_ollama import FakeOllama


def _segment(home: Path) -> Path:
    [segment] = (home / "edge" / "kb" / "shard" / "segments").iterdir()
    return segment


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))


def _first_data(path: Path) -> int:
    data = path.read_bytes()
    return next(i for i, b in enumerate(data) if b)


DAMAGE = {
    "collection.json emptied": lambda h: (h / "edge/kb/collection.json").write_text(""),
    "collection.json cut short": lambda h: (h / "edge/kb/collection.json").write_text(
        (h / "edge/kb/collection.json").read_text()[:100]
    ),
    "edge_config.json emptied": lambda h: (h / "edge/kb/shard/edge_config.json").write_text(""),
    "segment state broken": lambda h: (_segment(h) / "segment.json").write_text("{"),
    "WAL index broken": lambda h: (h / "edge/kb/shard/wal/first-index").write_text("xx"),
    "id tracker byte flipped": lambda h: _flip(_segment(h) / "mutable_id_tracker.mappings", 10),
    "shard folder deleted": lambda h: shutil.rmtree(h / "edge/kb/shard"),
    "vector bytes flipped": lambda h: _flip(
        p := _segment(h) / "vector_storage-dense/vectors/chunk_0.mmap", _first_data(p) + 5
    ),
}


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory) -> tuple[Path, Path]:
    """A home holding stores `kb` and `other`, ingested once; and the folder of kb's files."""
    base = tmp_path_factory.mktemp("damaged")
    docs = write_files(
        base / "kb", {f"d{i}.md": f"# Tents {i}\n\nTent {i} keeps the rain out." for i in range(3)}
    )
    other = write_files(base / "other", {"stove.md": "# Stoves\n\nStoves boil water."})
    home = base / "home"
    with FakeOllama() as fake:
        for folder, store in ((docs, "kb"), (other, "other")):
            done = run_cli("ingest", str(folder), "--store", store, ollama_url=fake.url, home=home)
            assert done.returncode == 0, done.stderr
    return home, docs


@pytest.mark.parametrize("kind", DAMAGE)
def test_a_damaged_store_is_named_with_its_repair_and_never_takes_others_down(
    two_stores, home, ollama, kind
):
    prepared, docs = two_stores
    copy_home(prepared, home)
    DAMAGE[kind](home)

    def cli(*args: str):
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    for args in (
        ("search", "tent", "--store", "kb"),
        ("sources", "--store", "kb"),
        ("ask", "tents?", "--store", "kb"),
        ("ingest", str(docs), "--store", "kb"),
    ):
        done = cli(*args)
        assert done.returncode == 1, (args, done.stdout)
        assert "Store 'kb' is damaged: " in done.stderr, (args, done.stderr)
        assert "archivist doctor --repair" in done.stderr

    # The other store is listed and searched; the damaged one listed as such.
    listing = cli("stores", "--json")
    assert listing.returncode == 0, listing.stderr
    by_name = {s["store"]: s for s in json.loads(listing.stdout)}
    assert by_name["other"]["chunks"] == 1 and by_name["kb"]["damaged"]
    assert cli("search", "stoves", "--store", "other").returncode == 0

    checked = cli("doctor")
    assert "Store 'kb' is damaged" in checked.stdout and "Check QDRANT_URL" not in checked.stdout

    repaired = cli("doctor", "--repair")
    assert "store 'kb' was damaged" in repaired.stdout, repaired.stdout
    [aside] = (home / "damaged").iterdir()  # moved, not deleted
    assert aside.name.startswith("kb-")
    rebuilt = cli("ingest", str(docs), "--store", "kb", "--json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert len(json.loads(rebuilt.stdout)["stored"]) == 3
    found = cli("search", "tent", "--store", "kb", "--json")
    assert found.returncode == 0 and len(json.loads(found.stdout)) == 3


def test_a_store_read_and_closed_stays_sealed_and_a_writer_reseals_it(two_stores, home, ollama):
    prepared, docs = two_stores
    copy_home(prepared, home)
    sums = home / "edge" / "kb" / "checksums.json"

    def vectors() -> dict[str, int]:
        files = json.loads(sums.read_text())["files"]
        return {k: v[0] for k, v in files.items() if "vector_storage" in k}

    before = vectors()
    assert any("vector_storage-dense" in name for name in before)
    for args in (("search", "tent", "--store", "kb"), ("stores",), ("sources", "--store", "kb")):
        assert run_cli(*args, ollama_url=ollama.url, home=home).returncode == 0
    assert vectors() == before  # reading changes none of the vectors' checksums
    write_files(docs.parent / "more", {"new.md": "# New\n\nA new tent."})
    more = str(docs.parent / "more")
    assert (
        run_cli("ingest", more, "--store", "kb", ollama_url=ollama.url, home=home).returncode == 0
    )
    assert json.loads(sums.read_text()) != before
    assert (
        run_cli("search", "tent", "--store", "kb", ollama_url=ollama.url, home=home).returncode == 0
    )


def test_a_shard_that_cannot_be_mapped_writable_is_not_called_damaged(
    two_stores, home, ollama, monkeypatch
):
    import qdrant_edge

    prepared, _ = two_stores
    copy_home(prepared, home)

    def refuse(path: str):
        raise Exception(
            f"Service runtime error: IO Error: Read-only file system (os error 30): {path}"
        )

    # What Edge says when it cannot map a file writable (a read-only mount; root ignores modes).
    monkeypatch.setattr(qdrant_edge.EdgeShard, "load", staticmethod(refuse))
    done = run_cli("search", "tent", "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert (
        "Cannot open store 'kb': Qdrant Edge cannot load it (Read-only file system" in done.stderr
    )
    assert "must be writable" in done.stderr and "damaged" not in done.stderr
