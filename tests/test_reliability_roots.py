"""Roots that move under a store: a file emptied, a folder that lists nothing, a root that
became a file or was deleted and made again while watched, a symbolic link swapped, labels
differing only in case."""

import json

from conftest import write_files
from test_sync import OLLAMA, cli, statuses, texts, until, watching  # noqa: F401


def test_an_emptied_file_loses_its_chunks_and_every_command_says_so(fake_models, home, tmp_path):
    kb = write_files(
        tmp_path / "kb",
        {"page.md": "# Page\n\nThe warranty lasts two years.", "other.md": "# O\n\nOther."},
    )
    cli(home, "ingest", str(kb), "--store", "s")
    (kb / "page.md").write_bytes(b"")
    # `sources` says what the next sync does.
    assert statuses(home)["page.md"] == (
        "changed",
        "emptied: the next sync or ingest removes its chunks",
    )
    done = cli(home, "sync", "--store", "s")
    # Every file counted: 1 unchanged, 1 skipped (empty) and its source removed.
    assert done.stdout == "s kb: 0 files stored, 1 unchanged, 0 failed, 1 skipped, 1 removed.\n"
    assert sorted(texts(home)) == ["other.md"]
    assert "page.md" not in statuses(home)  # nothing left to advise
    again = json.loads(cli(home, "sync", "--store", "s", "--json").stdout)
    assert again[0]["removed"] == [] and again[0]["stored"] == []
    # `ingest` (without --prune) agrees: an emptied file is a changed file, now empty.
    (kb / "page.md").write_text("# Page\n\nBack again.")
    cli(home, "ingest", str(kb), "--store", "s")
    (kb / "page.md").write_bytes(b"")
    report = json.loads(cli(home, "ingest", str(kb), "--store", "s", "--json").stdout)
    assert report["removed"] == ["page.md"]
    assert report["skipped"] == [{"source": "page.md", "reason": "empty file"}]
    assert sorted(texts(home)) == ["other.md"]


def test_the_watch_says_an_emptied_file_is_removed(fake_models, home, tmp_path):
    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "b.md": "# B\n\nBravo."})
    cli(home, "ingest", str(kb), "--store", "s")
    with watching(home) as (watcher, lines):
        (kb / "a.md").write_bytes(b"")
        assert until(lambda: "s: removed a.md (emptied)" in lines)
    assert sorted(texts(home)) == ["b.md"]


def test_a_root_that_lists_nothing_keeps_its_sources_until_sync_prune(fake_models, home, tmp_path):
    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "sub/b.md": "# B\n\nBravo."})
    cli(home, "ingest", str(kb), "--store", "s")
    (kb / "a.md").unlink()
    (kb / "sub" / "b.md").unlink()  # a mount point left empty: the folder is there, bare
    done = cli(home, "sync", "--store", "s", code=1)
    assert done.stdout == (
        "s kb: 0 files stored, 0 unchanged, 1 failed, 0 removed.\n"
        f"  failed: {kb}: lists no files now: its 2 sources are kept (an unmounted drive, a "
        "folder emptied?); sync --prune removes them\n"
    )
    assert sorted(texts(home)) == ["a.md", "sub/b.md"]
    done = cli(home, "sync", "--store", "s", "--prune")
    assert done.stdout == "s kb: 0 files stored, 0 unchanged, 0 failed, 2 removed.\n"
    assert texts(home) == {}


def test_a_root_folder_that_became_a_file_keeps_its_sources(fake_models, home, tmp_path):
    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha.", "b.md": "# B\n\nBravo."})
    other = write_files(tmp_path / "other", {"c.md": "# C\n\nCharlie."})
    cli(home, "ingest", str(kb), str(other), "--store", "s")
    for name in ("a.md", "b.md"):
        (kb / name).unlink()
    kb.rmdir()
    kb.write_text("# Now a file\n\nWhere the folder was.")
    (other / "d.md").write_text("# D\n\nDelta.")
    done = cli(home, "sync", "--store", "s", code=1)
    assert f"{kb} (kb, a root of 's') was a folder and is now a file: its sources are kept." in (
        done.stderr
    )
    assert "s other: 1 file stored, 1 unchanged, 0 failed, 0 removed." in done.stdout
    assert sorted(texts(home)) == ["kb/a.md", "kb/b.md", "other/c.md", "other/d.md"]


def test_a_watched_root_deleted_and_made_again_is_watched_again(fake_models, home, tmp_path):
    import shutil

    kb = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    cli(home, "ingest", str(kb), "--store", "s")
    with watching(home) as (watcher, lines):
        shutil.rmtree(kb)
        assert until(lambda: f"{kb} is missing: its sources are kept; watching for it to "
                     "return." in lines)  # fmt: skip
        assert sorted(texts(home)) == ["a.md"]  # kept
        write_files(kb, {"b.md": "# B\n\nBravo, in the folder made again."})
        assert until(lambda: f"{kb} is on disk again: syncing it." in lines)
        assert until(lambda: "b.md" in texts(home))
        (kb / "c.md").write_text("# C\n\nCharlie, written once watched again.")
        assert until(lambda: "c.md" in texts(home))
    assert "s: new c.md (1 chunk)" in lines


def test_a_link_swapped_to_outside_after_discovery_is_not_read(
    fake_models, archivist, tmp_path, monkeypatch
):
    from archivist.ingest import graph

    kb = write_files(tmp_path / "kb", {"real.md": "# Real\n\nThe real page.", "a.md": "# A\n\nA."})
    secret = write_files(tmp_path / "outside", {"secret.md": "# Secret\n\nThe root password."})
    (kb / "link.md").symlink_to(kb / "real.md")
    hashed = graph.content_hash

    def swap_after_hashing(path, *args, **kwargs):
        digest = hashed(path, *args, **kwargs)
        if path.name == "link.md":  # between the folder's walk and the file's reading
            path.unlink()
            path.symlink_to(secret / "secret.md")
        return digest

    monkeypatch.setattr(graph, "content_hash", swap_after_hashing)
    report = archivist.ingest([str(kb)], "s")
    assert report.failed == [
        {
            "source": "link.md",
            "reason": "symbolic link now leads outside the folder, not read (changed while it "
            "was read?)",
        }
    ]
    assert sorted(archivist.store("s").source_names()) == ["a.md", "real.md"]
    embedded = [t for request in fake_models.embed_requests() for t in request]
    assert not any("root password" in t for t in embedded)


def test_roots_labelled_apart_only_by_case_are_searched_by_name(
    fake_models, archivist, home, tmp_path
):
    a = write_files(tmp_path / "x" / "Docs", {"a.md": "# A\n\nAlpha widgets."})
    b = write_files(tmp_path / "y" / "docs", {"b.md": "# B\n\nBravo widgets."})
    archivist.ingest([str(a), str(b)], "s")
    store = archivist.store("s")
    # New roots get labels apart by more than case.
    assert sorted(r["label"] for r in store.info()["roots"]) == ["x/Docs", "y/docs"]
    # Labels made before that (`Docs` and `docs`): the one written as typed is meant, and
    # written in neither's case, both (was: ValueError for every search naming them).
    roots = [{**r, "label": r["label"].split("/")[-1]} for r in store.info()["roots"]]
    store.annotate(roots=roots)
    store.delete_source("x/Docs/a.md")
    store.delete_source("y/docs/b.md")
    archivist.ingest([str(a), str(b)], "s")
    assert store.source_names() == ["Docs/a.md", "docs/b.md"]
    assert store.match_sources("docs") == ["docs/b.md"]
    assert store.match_sources("Docs") == ["Docs/a.md"]
    assert store.match_sources("DOCS") == ["Docs/a.md", "docs/b.md"]
    found = cli(home, "search", "widgets", "--store", "s", "--source", "docs", "--json")
    assert {r["source"] for r in json.loads(found.stdout)} == {"docs/b.md"}
    # The MCP tool's call the same way.
    import anyio
    from mcp import Client

    from archivist.serving.mcp import StoreTools, build_server

    async def call() -> object:
        async with Client(build_server(StoreTools(archivist.settings, ["s"]))) as client:
            return await client.call_tool("search_s", {"query": "widgets", "source": "docs"})

    answer = anyio.run(call)
    assert not answer.is_error, answer.content
    assert {r["source"] for r in answer.structured_content["results"]} == {"docs/b.md"}
