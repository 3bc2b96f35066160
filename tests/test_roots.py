"""Roots: a store knows the folders and files its documents come from, names every source
uniquely, prunes only what a run covers, and keeps the stores made before it working."""

import json
import os
import shutil
import subprocess
from dataclasses import fields
from pathlib import Path

import pytest
from conftest import ROOT, SHOP, run_cli, write_files
from test_release_store import released_home

from archivist.app import Archivist
from archivist.ingest.request import RECORDED, IngestRequest
from archivist.ingest.roots import Root, RootSet, assign_labels, resolve
from archivist.settings import Settings

OLLAMA = "http://127.0.0.1:9"  # never reached: the in-process fake models answer

EN = {
    "guide/cors.md": "# CORS\n\nCross-origin requests need the Access-Control headers.",
    "guide/auth.md": "# Auth\n\nTokens expire after one hour.",
}
ZH = {
    "guide/cors.md": "# 跨域\n\n跨域请求需要访问控制响应头。",
    "guide/auth.md": "# 认证\n\n令牌一小时后过期。",
}


def cli(home, *args):
    done = run_cli(*args, ollama_url=OLLAMA, home=home)
    assert done.returncode == 0, done.stdout + done.stderr
    return done


def ingest(home, *args) -> dict:
    return json.loads(cli(home, "ingest", *args, "--json").stdout)


def sources(home, store="s") -> list[dict]:
    return json.loads(cli(home, "sources", "--store", store, "--json").stdout)


def names(home, store="s") -> list[str]:
    return [s["source"] for s in sources(home, store)]


def translated(tmp_path):
    docs = tmp_path / "docs"
    write_files(docs / "en", EN)
    write_files(docs / "zh", ZH)
    return docs


def search(home, query, *extra) -> list[dict]:
    found = cli(home, "search", query, "--store", "s", "--json", *extra)
    return json.loads(found.stdout)


def test_two_folders_with_the_same_file_names_are_both_kept(fake_models, home, tmp_path):
    docs = translated(tmp_path)
    report = ingest(home, str(docs / "en"), str(docs / "zh"), "--store", "s")
    assert report["files"] == 4
    assert sorted(s["source"] for s in report["stored"]) == [
        "en/guide/auth.md", "en/guide/cors.md", "zh/guide/auth.md", "zh/guide/cors.md",
    ]  # fmt: skip
    assert names(home) == sorted(s["source"] for s in report["stored"])
    [first, *_] = search(home, "跨域请求")
    assert first["source"] == "zh/guide/cors.md"


def test_a_second_folder_never_replaces_the_first(fake_models, home, tmp_path):
    docs = translated(tmp_path)
    first = ingest(home, str(docs / "en"), "--store", "s")
    assert sorted(s["source"] for s in first["stored"]) == ["guide/auth.md", "guide/cors.md"]
    fake_models.clear_requests()
    second = ingest(home, str(docs / "zh"), "--store", "s")
    # The second folder's files are new; the first's are renamed, not embedded again.
    assert sorted((s["source"], s["status"]) for s in second["stored"]) == [
        ("zh/guide/auth.md", "new"), ("zh/guide/cors.md", "new"),
    ]  # fmt: skip
    assert second["renamed"] == {
        "guide/auth.md": "en/guide/auth.md", "guide/cors.md": "en/guide/cors.md",
    }  # fmt: skip
    embedded = [t for request in fake_models.embed_requests() for t in request]
    assert embedded and not any("Access-Control" in t or "Tokens expire" in t for t in embedded)
    assert names(home) == [
        "en/guide/auth.md", "en/guide/cors.md", "zh/guide/auth.md", "zh/guide/cors.md",
    ]  # fmt: skip
    [hit, *_] = search(home, "Access-Control headers")
    assert hit["source"] == "en/guide/cors.md"
    # Ingesting the first again finds it unchanged under its new names.
    again = ingest(home, str(docs / "en"), "--store", "s")
    assert again["stored"] == [] and sorted(again["unchanged"]) == [
        "en/guide/auth.md", "en/guide/cors.md",
    ]  # fmt: skip


def test_prune_removes_only_what_the_roots_ingested_no_longer_hold(fake_models, home, tmp_path):
    a = write_files(tmp_path / "a", {"one.md": "# One\n\nFirst.", "two.md": "# Two\n\nSecond."})
    b = write_files(tmp_path / "b", {"three.md": "# Three\n\nThird."})
    ingest(home, str(a), "--store", "s")
    report = ingest(home, str(b), "--store", "s", "--prune")
    assert report["removed"] == []
    assert names(home) == ["a/one.md", "a/two.md", "b/three.md"]
    (a / "two.md").unlink()
    assert ingest(home, str(b), "--store", "s", "--prune")["removed"] == []
    assert "a/two.md" in names(home)
    assert ingest(home, str(a), "--store", "s", "--prune")["removed"] == ["a/two.md"]
    assert names(home) == ["a/one.md", "b/three.md"]
    # A part of a root prunes only within that part.
    write_files(a, {"sub/x.md": "# X\n\nex.", "sub/y.md": "# Y\n\nwhy."})
    ingest(home, str(a), "--store", "s")
    (a / "sub" / "y.md").unlink()
    (a / "one.md").unlink()
    assert ingest(home, str(a / "sub"), "--store", "s", "--prune")["removed"] == ["a/sub/y.md"]
    assert "a/one.md" in names(home)


def test_a_missing_root_folder_is_never_pruned(fake_models, home, tmp_path):
    a = write_files(tmp_path / "a", {"one.md": "# One\n\nFirst."})
    b = write_files(tmp_path / "b", {"two.md": "# Two\n\nSecond."})
    ingest(home, str(a), str(b), "--store", "s")
    shutil.rmtree(a)
    done = run_cli("ingest", str(a), str(b), "--store", "s", "--prune", "--json",
                   ollama_url=OLLAMA, home=home)  # fmt: skip
    assert json.loads(done.stdout)["removed"] == []
    assert names(home) == ["a/one.md", "b/two.md"]


def test_two_files_of_the_same_name_on_the_command_line_are_both_stored(
    fake_models, home, tmp_path
):
    docs = translated(tmp_path)
    en, zh = docs / "en" / "guide" / "cors.md", docs / "zh" / "guide" / "cors.md"
    report = ingest(home, str(en), str(zh), "--store", "s")
    assert sorted(s["source"] for s in report["stored"]) == [
        "en/guide/cors.md", "zh/guide/cors.md",
    ]  # fmt: skip
    # A file alone keeps its name; files of one folder keep theirs beside each other.
    other = tmp_path / "home2"
    report = ingest(other, str(docs / "en" / "guide" / "auth.md"), str(en), "--store", "s")
    assert sorted(s["source"] for s in report["stored"]) == ["auth.md", "cors.md"]


def test_a_file_inside_a_recorded_folder_is_part_of_that_root(fake_models, home, tmp_path):
    docs = translated(tmp_path)
    ingest(home, str(docs / "en"), str(docs / "zh"), "--store", "s")
    (docs / "en" / "guide" / "cors.md").write_text("# CORS\n\nPreflight requests too.")
    report = ingest(home, str(docs / "en" / "guide" / "cors.md"), "--store", "s")
    assert report["stored"] == [{"source": "en/guide/cors.md", "status": "updated", "chunks": 1}]
    assert len(names(home)) == 4
    # A folder holding recorded roots takes them in: their sources get its names.
    fake_models.clear_requests()
    report = ingest(home, str(docs), "--store", "s")
    assert report["stored"] == [] and fake_models.embed_requests() == []
    assert names(home) == [
        "en/guide/auth.md", "en/guide/cors.md", "zh/guide/auth.md", "zh/guide/cors.md",
    ]  # fmt: skip
    info = json.loads(cli(home, "sources", "--store", "s", "--json").stdout)
    assert {s["root"] for s in info} == {str(docs.resolve())}


def test_labels_are_folder_names_made_unique_by_their_parents():
    def root(kind, location):
        return Root.new(kind, location, {})

    kept = [root("folder", "/x/docs/en")]
    kept[0].label = "en"
    new = [root("folder", "/y/docs/en"), root("folder", "/z/docs/en"), root("folder", "/a/zh")]
    assign_labels(kept, new)
    assert [r.label for r in new] == ["y/docs/en", "z/docs/en", "zh"]
    files = [root("file", "/d/en/g/cors.md"), root("file", "/d/zh/g/cors.md")]
    assign_labels([], files)
    assert [r.label for r in files] == ["en/g/cors.md", "zh/g/cors.md"]
    # A label that is a folder of another could make one name twice: not allowed either.
    clash = [root("file", "/p/shop/notes.md")]
    shop = root("folder", "/q/shop")
    shop.label = "shop"
    assign_labels([shop], clash)
    assert clash[0].label == "notes.md"
    nested = [root("folder", "/m/n"), root("folder", "/k/m/n")]
    assign_labels([], nested)
    assert [r.label for r in nested] == ["m/n", "k/m/n"]
    same = [root("url", "https://a.org/x"), root("url", "https://a.org/x/")]
    assign_labels([], same)
    assert [r.label for r in same] == ["a.org/x", "a.org/x-2"]


def test_a_url_root_fits_the_same_record():
    before = RootSet([])
    resolution = resolve(["https://example.org/docs/"], before, {"max_pages": 10})
    [root] = resolution.roots.roots
    assert (root.kind, root.location, root.label) == (
        "url",
        "https://example.org/docs/",
        "example.org",
    )
    assert root.options == {"max_pages": 10}
    # A page is named by its URL, in a store of one root or several (no label needed).
    assert resolution.roots.name(root, "intro.html") == "https://example.org/docs/intro.html"
    two = resolve(["https://example.org/docs/", "https://example.org/blog/"], before, {})
    assert [two.roots.name(r, "a.html") for r in two.roots.roots] == [
        "https://example.org/docs/a.html",
        "https://example.org/blog/a.html",
    ]
    assert Root.from_dict(json.loads(json.dumps(root.to_dict()))) == root


# For each recorded field of `IngestRequest`, `build` arguments giving it a value other than
# the default (the splitter comes of the chunk sizes).
RECORDED_SAMPLES = {
    "splitter": {},
    "chunk_size": {"chunk_size": 600},
    "chunk_overlap": {"chunk_overlap": 60},
    "loader": {
        "text_extensions": [".py", ".toml"],
        "loaders": ["*.slow=misbehaving_loaders:EndlessLoader"],
        "text_field": "body",
        "id_field": "key",
    },
    "folder_rules": {"include": ["*.md"], "exclude": ["drafts/"]},
    "web": {"max_pages": 10, "max_depth": 2},
}


def test_every_recorded_option_is_read_back_for_the_roots_it_applies_to(tmp_path):
    recorded = {
        f.name: f.metadata[RECORDED] for f in fields(IngestRequest) if RECORDED in f.metadata
    }
    assert set(recorded) == set(RECORDED_SAMPLES), "give a new recorded option a sample above"
    folder = write_files(tmp_path / "docs", {"a.md": "# A\n\nAy."})
    asked = {key: value for sample in RECORDED_SAMPLES.values() for key, value in sample.items()}
    request = IngestRequest.build([str(folder)], "s", **asked)
    options = json.loads(json.dumps(request.recorded_options()))  # as the store keeps them
    assert options["splitter"] == request.splitter.as_dict()
    for kind, location in (
        ("folder", str(folder)),
        ("file", str(folder / "a.md")),
        ("url", "https://example.org/docs/"),
    ):
        root = Root.from_dict(json.loads(json.dumps(Root.new(kind, location, options).to_dict())))
        restored = IngestRequest.from_recorded(root, "s", prune=True)
        read_back = [name for name, how in recorded.items() if kind in how.kinds]
        expected = {k: v for name in read_back for k, v in RECORDED_SAMPLES[name].items()}
        assert restored == IngestRequest.build([location], "s", prune=True, **expected), kind
        default = IngestRequest.build([location], "s")
        for name in read_back:
            assert getattr(restored, name) == getattr(request, name), (kind, name)
            assert getattr(restored, name) != getattr(default, name), (kind, name)
    assert {name for name, how in recorded.items() if "url" in how.kinds} == {
        "chunk_size",
        "chunk_overlap",
        "web",
    }
    # A root recorded before an option existed (or before options were kept) reads as
    # `build`'s defaults.
    for kind, location in (("folder", str(folder)), ("url", "https://example.org/docs/")):
        bare = Root.from_dict({"id": "x", "kind": kind, "location": location})
        assert IngestRequest.from_recorded(bare, "s") == IngestRequest.build([location], "s")


def test_a_released_store_keeps_its_names_and_gets_its_root(fake_models, home):
    released_home(home)
    report = ingest(home, str(SHOP), "--store", "shop_docs")
    assert len(report["unchanged"]) == 10 and report["stored"] == [] and report["renamed"] == {}
    assert fake_models.embed_requests() == []  # nothing embedded again
    listed = sources(home, "shop_docs")
    assert {s["root"] for s in listed} == {str(SHOP.resolve())}
    assert {s["status"] for s in listed} == {"ok"}
    assert "refund.md" in [s["source"] for s in listed]


def test_a_store_made_before_roots_were_recorded_is_taken_in(fake_models, home, tmp_path):
    docs = translated(tmp_path)
    ingest(home, str(docs / "en"), "--store", "s")
    app = Archivist(Settings(ollama_host=OLLAMA, home=home))
    try:  # as the previous release left it: no roots in its metadata
        store = app.store("s")
        store.annotate(roots=[])
    finally:
        app.close()
    listed = sources(home)
    assert [(s["source"], s["root"]) for s in listed] == [
        ("guide/auth.md", None), ("guide/cors.md", None),
    ]  # fmt: skip
    fake_models.clear_requests()
    report = ingest(home, str(docs / "en"), str(docs / "zh"), "--store", "s")
    assert report["renamed"] == {
        "guide/auth.md": "en/guide/auth.md", "guide/cors.md": "en/guide/cors.md",
    }  # fmt: skip
    assert sorted(s["source"] for s in report["stored"]) == ["zh/guide/auth.md", "zh/guide/cors.md"]
    embedded = [t for request in fake_models.embed_requests() for t in request]
    assert not any("Access-Control" in t for t in embedded)


def fake_checkout(tmp_path: Path) -> Path:
    """A copy of the `run` script in a checkout whose venv is installed and up to date (its
    stamp matches), and whose `archivist` prints the folder it runs in and its arguments."""
    checkout = tmp_path / "checkout"
    bin_dir = checkout / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy(ROOT / "run", checkout / "run")
    (checkout / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    sha = subprocess.run(
        ["sha256sum", "pyproject.toml"], cwd=checkout, capture_output=True, text=True, check=True
    ).stdout.split()[0]
    (checkout / ".venv" / ".pyproject.sha256").write_text(f"{sha} \n")
    for name, body in {"python": "exit 0", "archivist": 'echo "$PWD"; printf "%s\\n" "$@"'}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return checkout


def test_run_starts_the_app_in_the_folder_the_user_is_in(tmp_path):
    checkout = fake_checkout(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(checkout / "run"), "ingest", "docs/x.md", "--store", "s"],
        cwd=elsewhere, capture_output=True, text=True, timeout=30,
        env={**os.environ, "PATH": os.environ["PATH"]},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Installing" not in done.stderr  # the venv was up to date: nothing installed
    assert done.stdout.splitlines() == [str(elsewhere), "ingest", "docs/x.md", "--store", "s"]


@pytest.mark.parametrize("args", [["eval", "generate", "--out", "x.jsonl"]])
def test_run_keeps_relative_outputs_in_the_users_folder(tmp_path, args):
    checkout = fake_checkout(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [str(checkout / "run"), *args], cwd=elsewhere, capture_output=True, text=True, timeout=30
    )
    assert done.stdout.splitlines()[0] == str(elsewhere)


def test_names_that_shift_into_each_other_are_each_renamed_once(fake_models, home, tmp_path):
    kb = write_files(
        tmp_path / "kb", {"x.md": "# Top\n\nThe top file.", "kb/x.md": "# In\n\nInner."}
    )
    other = write_files(tmp_path / "other", {"y.md": "# Y\n\nWhy."})
    ingest(home, str(kb), "--store", "s")
    report = ingest(home, str(other), "--store", "s")
    assert report["renamed"] == {"x.md": "kb/x.md", "kb/x.md": "kb/kb/x.md"}
    app = Archivist(Settings(ollama_host=OLLAMA, home=home))
    try:
        texts = {c["source"]: c["text"] for c in app.store("s").chunks()}
    finally:
        app.close()
    assert texts == {
        "kb/x.md": "# Top\n\nThe top file.",
        "kb/kb/x.md": "# In\n\nInner.",
        "other/y.md": "# Y\n\nWhy.",
    }
