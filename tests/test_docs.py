"""The README and the manual in docs/: every link resolves, and the README stays a front door."""

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption
from typer.testing import CliRunner

from archivist.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
MAX_README_LINES = 350

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target), with an optional "title"; the text may hold code spans.
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def pages() -> list[Path]:
    """The README and every page of the manual."""
    return [README, *sorted(DOCS.glob("*.md"))]


def prose(text: str) -> Iterator[tuple[int, str]]:
    """Yield (line number, line) outside fenced code blocks."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def slug(heading: str) -> str:
    """Turn a heading into its GitHub anchor: lower-case, punctuation dropped, `-` for spaces."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link reads as its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page; a repeated heading gets -1, -2… as on GitHub."""
    seen: dict[str, int] = {}
    found = set()
    for _, line in prose(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> Iterator[tuple[int, str]]:
    """Yield (line number, target) of every link on a page, outside code; a link may wrap."""
    text = page.read_text(encoding="utf-8")
    lines = [""] * len(text.splitlines())
    for number, line in prose(text):
        lines[number - 1] = CODE_SPAN.sub("", line)
    text = "\n".join(lines)
    for match in LINK.finditer(text):
        yield text.count("\n", 0, match.start()) + 1, match.group(1)


def broken_links(page: Path, root: Path = ROOT) -> list[str]:
    """List each relative link of a page whose file or heading does not exist."""
    problems = []
    for number, target in links(page):
        if SCHEME.match(target):
            continue  # http:, https:, mailto: are not ours to check
        path, _, anchor = unquote(target).partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}:{number}: {target}"
        if not dest.is_relative_to(root):
            problems.append(f"{where} leads out of the repository")
        elif not dest.exists():
            problems.append(f"{where}: no file {dest.relative_to(root)}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            problems.append(f"{where}: no heading with the anchor #{anchor}")
    return problems


def command_table() -> list[str]:
    """The first cell of every row of the README's command table."""
    section = README.read_text(encoding="utf-8").split("\n## Commands\n", 1)[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [re.split(r"(?<!\\)\|", row)[1] for row in rows[2:]]


def listed_commands(args: list[str]) -> list[str]:
    """The commands a `--help` lists, as a user sees them."""
    result = CliRunner().invoke(app, [*args, "--help"])
    assert result.exit_code == 0, result.output
    if "\nCommands:\n" not in result.output:
        return []
    listing = result.output.split("\nCommands:\n", 1)[1]
    return [line.split()[0] for line in listing.splitlines() if line.startswith("  ")]


def mentions(cell: str, name: str) -> bool:
    """Whether a table cell names a command or flag as a whole word."""
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", cell) is not None


def test_every_relative_link_points_to_an_existing_file_and_heading():
    assert len(pages()) > 1
    problems = [problem for page in pages() for problem in broken_links(page)]
    assert problems == []


def test_the_link_check_finds_missing_files_headings_and_links_out_of_the_repository(tmp_path):
    repo = tmp_path / "repo"
    (repo / "docs").mkdir(parents=True)
    (repo / "docs" / "chat.md").write_text("# Chat and ask\n\n## The answer as JSON\n")
    (tmp_path / "elsewhere.md").touch()
    page = repo / "README.md"
    page.write_text(
        "# Archivist\n\n## Two commands\n\n"
        "[ok](docs/chat.md) [ok](docs/chat.md#the-answer-as-json) [ok](#two-commands)\n"
        "[web](https://ollama.com) `[in code](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        "[gone](docs/ingestion.md) [no heading](docs/chat.md#context-budget)\n"
        "[no heading here](#commands) [out](../elsewhere.md) [a link that\n"
        "wraps](docs/chat.md#the-answer) `code` [ok](docs/chat.md#the-answer-as-json)\n"
    )

    assert broken_links(page, repo) == [
        "README.md:10: docs/ingestion.md: no file docs/ingestion.md",
        "README.md:10: docs/chat.md#context-budget: no heading with the anchor #context-budget",
        "README.md:11: #commands: no heading with the anchor #commands",
        "README.md:11: ../elsewhere.md leads out of the repository",
        "README.md:11: docs/chat.md#the-answer: no heading with the anchor #the-answer",
    ]


def test_headings_get_githubs_anchors(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# Moving stores: `archivist migrate`\n"
        "## What fails, and what is skipped\n"
        "## Decisions\n## Decisions\n"
        "### Fusion, designed and measured.\n"
        "## See [Retrieval](retrieval.md) first\n"
        "## 配送说明 (CJK)\n"
        "```\n# a shell comment, not a heading\n```\n"
    )

    assert anchors(page) == {
        "moving-stores-archivist-migrate",
        "what-fails-and-what-is-skipped",
        "decisions",
        "decisions-1",
        "fusion-designed-and-measured",
        "see-retrieval-first",
        "配送说明-cjk",
    }


def test_the_readme_is_a_front_door_that_leads_to_every_page_of_the_manual():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines; move detail to docs/"
    linked = {(README.parent / unquote(t).partition("#")[0]).resolve() for _, t in links(README)}
    orphans = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert orphans == [], "docs pages the README does not link to"


def test_every_command_archivist_help_lists_is_in_the_readme_command_table():
    table = command_table()
    commands = listed_commands([])
    assert "ingest" in commands and "chat" in commands  # the help was parsed
    missing = []
    for name in commands:
        for full in [[name], *([name, sub] for sub in listed_commands([name]))]:
            words = "archivist " + " ".join(full)
            if not any(mentions(cell, words) for cell in table):
                missing.append(words)
    assert missing == []


def test_every_flag_of_every_command_is_in_its_row_of_the_command_table():
    table = command_table()
    missing = []

    def check(command: TyperCommand | TyperGroup, words: str) -> None:
        rows = [cell for cell in table if mentions(cell, words)]
        options = [p for p in command.params if isinstance(p, TyperOption) and not p.hidden]
        for option in options:
            if not any(mentions(row, opt) for row in rows for opt in option.opts):
                missing.append(f"{words} {'/'.join(option.opts)}")
        for name, sub in getattr(command, "commands", {}).items():
            check(sub, f"{words} {name}")

    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        check(command, f"archivist {name}")
    assert missing == []


def test_the_readme_layout_names_every_module_and_folder_of_the_package():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme.split("pyproject.toml      ", 1)[1].split("```", 1)[0]
    named = {line.split()[0] for line in layout.splitlines() if line.strip()}
    missing = []
    for folder in ("agent", "archivist", "ingest", "tools"):
        for path in sorted((ROOT / folder).iterdir()):
            if path.name.startswith(("_", ".")):
                continue
            if path.suffix == ".py" and path.name not in named:
                missing.append(f"{folder}/{path.name}")
            if path.is_dir() and (path / "__init__.py").exists() and f"{path.name}/" not in named:
                missing.append(f"{folder}/{path.name}/")
    assert not missing, f"README's layout does not name: {', '.join(missing)}"
