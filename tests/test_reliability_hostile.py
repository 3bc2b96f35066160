"""Small files whose cost grew without bound (nested YAML aliases, patterns that backtrack, a
heading a megabyte long): each is refused with its reason or read in one pass, and the good
files beside it are stored. The limits are the loaders' constants, asserted here; the default
test timeout stops the run should any of these files cost what it did."""

import json

import pytest
from conftest import run_cli, write_files

from archivist.ingest.loaders import LoadError, load
from archivist.ingest.loaders.text import (
    MAX_FRONT_MATTER_CHARS,
    MAX_FRONT_MATTER_DEPTH,
    MAX_FRONT_MATTER_VALUES,
    mdx_to_markdown,
)
from archivist.ingest.splitter import MAX_HEADING_CHARS, split_text
from archivist.tools.store import KnowledgeStore, connect


def alias_bomb(levels: int = 9) -> str:
    """Front matter of a few hundred bytes standing for 9**levels values."""
    lines = ["l0: &l0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        ref = f"*l{i - 1}"
        lines.append(f"l{i}: &l{i} [{', '.join([ref] * 9)}]")
    return "---\n" + "\n".join(lines) + "\n---\n# Bomb\n\nNever stored.\n"


HOSTILE_PATTERN = "*a" * 12 + "b"  # as a regex, backtracks over every way to place 12 stars


def test_front_matter_aliases_and_depth_are_bounded(tmp_path):
    bomb = alias_bomb()
    assert len(bomb) < 600  # 9**9 values once expanded
    path = write_files(tmp_path, {"bomb.md": bomb}) / "bomb.md"
    with pytest.raises(LoadError, match=f"more than {MAX_FRONT_MATTER_VALUES:,} values"):
        load(path)

    deep = "---\nkey: " + "[" * (MAX_FRONT_MATTER_DEPTH + 5) + "]" * (MAX_FRONT_MATTER_DEPTH + 5)
    (tmp_path / "deep.md").write_text(deep + "\n---\nBody.\n", encoding="utf-8")
    with pytest.raises(LoadError, match=f"nested more than {MAX_FRONT_MATTER_DEPTH} levels"):
        load(tmp_path / "deep.md")

    # Aliases used as people use them (shared defaults) still load, expanded.
    shared = "---\nbase: &b {owner: ops, tier: 2}\nprod: *b\n---\nBody.\n"
    (tmp_path / "shared.md").write_text(shared, encoding="utf-8")
    [section] = load(tmp_path / "shared.md")
    assert section.metadata["prod"] == {"owner": "ops", "tier": 2}


def test_mdx_and_headings_that_used_to_backtrack_are_read_in_one_pass():
    # A tag followed by whitespace that never closes, and a comment opener repeated.
    assert mdx_to_markdown("<Tab" + " " * 20_000 + "x\n\nText.").endswith("Text.")
    assert mdx_to_markdown("{/*" * 30_000 + "\n\nText.").endswith("Text.")
    assert mdx_to_markdown('<Tab title="Pay" >\nInside\n</Tab>{/* gone */}') == "**Pay**\n\nInside"
    # A heading line that keeps offering a closing run of `#`s, and one a megabyte long.
    split_text("# a" + " #" * 50_000 + "x\n\nBody.")
    chunks = split_text("# " + "word " * 200_000 + "\n\nBody text under it.")
    assert len(chunks) > 100
    assert {len(c.headings[0]) for c in chunks} == {MAX_HEADING_CHARS}
    assert split_text("## Refunds ##\n\nWithin 30 days.")[0].headings == ["Refunds"]


def test_a_folder_of_hostile_small_files_stores_the_good_ones(ollama, home, tmp_path):
    big_front = "---\nnotes: " + json.dumps("n" * (MAX_FRONT_MATTER_CHARS + 10)) + "\n---\nBody.\n"
    root = write_files(
        tmp_path / "kb",
        {
            "good.md": "# Good\n\nTents keep the rain out.",
            "bomb.md": alias_bomb(),
            "big-front.md": big_front,
            "tags.mdx": "# Tags\n\n<Tab" + " " * 20_000 + "x\n\nLanterns glow.",
            "comments.mdx": "# Comments\n\n" + "{/*" * 30_000 + "\n\nStoves boil water.",
            "heading.md": "# " + "word " * 200_000 + "\n\nBody text under it.",
            ".gitignore": HOSTILE_PATTERN + "\n",
            "a" * 80 + ".md": "# Long name\n\nPaddles come in pairs.",
        },
    )
    done = run_cli("ingest", str(root), "--store", "kb", "--json", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    failed = {f["source"]: f["reason"] for f in report["failed"]}
    assert set(failed) == {"bomb.md", "big-front.md"}
    assert f"more than {MAX_FRONT_MATTER_VALUES:,} values" in failed["bomb.md"]
    assert f"over the {MAX_FRONT_MATTER_CHARS // 1024} KB limit" in failed["big-front.md"]
    client = connect(home / "edge")
    try:
        store = KnowledgeStore(client, "kb")
        assert sorted(store.sources()) == sorted(
            ["good.md", "tags.mdx", "comments.mdx", "heading.md", "a" * 80 + ".md"]
        )
        payloads = list(store.chunks())
        # No chunk carries more than the limits allow, however long its heading was.
        assert max(len(json.dumps(p.get("metadata", {}))) for p in payloads) < 2 * MAX_HEADING_CHARS
    finally:
        client.close()


def test_an_ignore_pattern_of_many_stars_is_matched_in_linear_time(tmp_path):
    from archivist.ingest.discovery import discover

    root = write_files(
        tmp_path / "kb",
        {
            ".gitignore": HOSTILE_PATTERN + "\n*.log\n",
            "a" * 200 + ".md": "# Long name\n\nPaddles come in pairs.",
            "a" * 12 + "b": "ignored: it matches the pattern",
            "run.log": "ignored",
        },
    )
    files, failed, skipped = discover([root])
    assert [f.source for f in files] == ["a" * 200 + ".md"] and not failed
    assert {s.source: s.reason for s in skipped} == {
        ".gitignore": "hidden file",
        "a" * 12 + "b": "ignored by .gitignore",
        "run.log": "ignored by .gitignore",
    }
