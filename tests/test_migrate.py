"""`archivist migrate`: stores copied to another Qdrant without embedding anything again.

No Qdrant server runs here, so the copies go from one embedded home to another (`--to-home`);
a server target goes through the same client operations (scroll with vectors, upsert), and
the congruence suite copies into a server when QDRANT_URL is set.
"""

import json

import pytest
from conftest import SHOP, run_cli
from fake_ollama import FakeOllama

from archivist.app import Archivist
from archivist.settings import Settings
from archivist.tools import migrate as migrate_module
from archivist.tools.store import KnowledgeStore, connect

DEAD_OLLAMA = "http://127.0.0.1:9"  # nothing listens: a migration must not need Ollama


def everything(home, store):
    """Every point of a store in a home, with its vectors, and the store's metadata."""
    client = connect(home / "edge")
    try:
        found, offset = {}, None
        while True:
            batch, offset = client.scroll(
                store, limit=100, offset=offset, with_payload=True, with_vectors=True
            )
            found.update({str(p.id): (p.payload, p.vector) for p in batch})
            if offset is None:
                break
        return found, KnowledgeStore(client, store).info()
    finally:
        client.close()


@pytest.fixture(scope="module")
def two_stores(tmp_path_factory):
    """A home holding the sample shop and a small second store (tests only read it)."""
    root = tmp_path_factory.mktemp("source")
    (root / "hr").mkdir()
    (root / "hr" / "leave.md").write_text("# Leave\n\nStaff get 30 days of leave.")
    with FakeOllama() as fake:
        app = Archivist(Settings(ollama_host=fake.url, home=root / "home"))
        app.ingest([str(SHOP)], "shop_docs", description="policies of an outdoor shop")
        app.ingest([str(root / "hr")], "hr_docs")
        app.close()
    return root / "home"


@pytest.fixture
def migrate():
    """Run `archivist migrate ARGS` against a home, with no Ollama (migrating embeds nothing)."""

    def run(*args, home):
        return run_cli("migrate", *args, ollama_url=DEAD_OLLAMA, home=home)

    return run


def test_every_store_is_copied_point_for_point_with_its_metadata(two_stores, tmp_path):
    backup = tmp_path / "backup"
    args = ["--from-home", str(two_stores), "--to-home", str(backup), "--json"]
    done = run_cli("migrate", *args, ollama_url=DEAD_OLLAMA, home=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["from"] == str(two_stores) and report["to"] == str(backup)
    shop, _ = everything(two_stores, "shop_docs")
    assert [(s["store"], s["chunks"]) for s in report["stores"]] == [
        ("hr_docs", 1),
        ("shop_docs", len(shop)),
    ]
    for store in ("shop_docs", "hr_docs"):
        assert everything(backup, store) == everything(two_stores, store)


def test_the_copy_answers_searches_as_the_original_does(two_stores, ollama, tmp_path, migrate):
    backup = tmp_path / "backup"
    assert migrate("--to-home", str(backup), home=two_stores).returncode == 0
    results = []
    for home in (two_stores, backup):
        app = Archivist(Settings(home=home, ollama_host=ollama.url))
        try:
            results.append(app.search("refund within days", "shop_docs", k=5))
        finally:
            app.close()
    assert results[0] == results[1] and results[0][0]["source"] == "refund.md"


def test_a_target_store_with_chunks_is_kept_unless_forced(two_stores, tmp_path, migrate):
    backup = tmp_path / "backup"
    assert migrate("--to-home", str(backup), "--store", "hr_docs", home=two_stores).returncode == 0
    before = everything(backup, "hr_docs")

    refused = migrate("--to-home", str(backup), home=two_stores)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "The target already has a store 'hr_docs' with 1 chunks." in refused.stderr
    assert "--force" in refused.stderr
    client = connect(backup / "edge")
    assert not KnowledgeStore(client, "shop_docs").exists(), "nothing copied after a refusal"
    client.close()

    forced = migrate("--to-home", str(backup), "--force", home=two_stores)
    assert forced.returncode == 0, forced.stderr
    assert "shop_docs: " in forced.stdout and "nothing was embedded again" in forced.stdout
    assert everything(backup, "hr_docs") == before


def test_only_the_named_stores_are_copied(two_stores, tmp_path, migrate):
    backup = tmp_path / "backup"
    done = migrate("--to-home", str(backup), "--store", "hr_docs", home=two_stores)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0].startswith("hr_docs: 1 chunk copied in ")
    app = Archivist(Settings(home=backup, ollama_host=DEAD_OLLAMA))
    try:
        assert [s["store"] for s in app.stores()] == ["hr_docs"]
    finally:
        app.close()


@pytest.mark.filterwarnings("ignore:Failed to obtain server version")
@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "Say where to copy to."),
        (["--to-home", "B", "--to-url", "http://127.0.0.1:9"], "Say where to copy to."),
        (["--to-home", "{home}"], "The source and the target are the same home."),
        (["--to-home", "B", "--store", "nothing"], "There is no store named 'nothing'."),
        (["--to-home", "B", "--from-home", "{empty}"], "There is no embedded store in"),
        (["--to-url", "http://127.0.0.1:9"], "Cannot copy from {home} to http://127.0.0.1:9"),
    ],
)
def test_a_migration_that_cannot_run_says_why(two_stores, tmp_path, migrate, args, message):
    (tmp_path / "empty").mkdir()
    fill = {"home": str(two_stores), "empty": str(tmp_path / "empty")}
    args = [a.format(**fill) if a != "B" else str(tmp_path / "B") for a in args]
    done = migrate(*args, home=two_stores)
    assert done.returncode == 1
    assert message.format(**fill) in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "B").exists()  # a refused copy leaves no target behind


class Killed(BaseException):
    """Stands for the process dying at the exact step."""


def test_a_copy_cut_short_is_refused_by_searches_and_finished_by_the_same_command(
    two_stores, ollama, tmp_path, migrate, monkeypatch
):
    backup = tmp_path / "backup"
    real = migrate_module.copy_points

    def dies_after_a_batch(source, target, batch=256, on_progress=None):
        def die(event, fields):
            raise Killed

        return real(source, target, 5, die)

    with monkeypatch.context() as patch:
        patch.setattr(migrate_module, "copy_points", dies_after_a_batch)
        cut = migrate("--to-home", str(backup), "--store", "shop_docs", home=two_stores)
    assert cut.returncode == 1
    held, _ = everything(backup, "shop_docs")
    assert len(held) == 5

    searched = run_cli(
        "search", "refund", "--store", "shop_docs", ollama_url=ollama.url, home=backup
    )
    assert searched.returncode == 1 and "Traceback" not in searched.stderr
    assert "Store 'shop_docs' is an unfinished copy of store 'shop_docs'" in searched.stderr
    assert "Run the same `archivist migrate` command again" in searched.stderr

    again = migrate("--to-home", str(backup), "--store", "shop_docs", home=two_stores)
    assert again.returncode == 0, again.stderr
    assert everything(backup, "shop_docs") == everything(two_stores, "shop_docs")
    searched = run_cli(
        "search", "refund", "--store", "shop_docs", ollama_url=ollama.url, home=backup
    )
    assert searched.returncode == 0 and "refund" in searched.stdout.lower()
