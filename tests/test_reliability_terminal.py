"""Documents, file names and model output cannot drive the terminal: escapes are shown, not run."""

import io
import json

from conftest import run_cli, write_files

from archivist.tools.progress import Token

# Clear the screen, retitle the window (OSC, ended by BEL), an 8-bit CSI, a carriage return.
HOSTILE = "\x1b[2J\x1b]0;pwned\x07\x9b31m\r"
RAW = ("\x1b", "\x07", "\x9b", "\r")
EVIL_NAME = "evil\x1b]0;t\x07\nname.md"


def shows_no_raw_escapes(*outputs: str) -> None:
    for output in outputs:
        assert not any(c in output for c in RAW), repr(output)


def test_escapes_in_documents_and_file_names_never_reach_the_terminal(ollama, home, tmp_path):
    root = write_files(
        tmp_path / "kb",
        {
            "refund.md": f"# Refunds\n\nRefunds are paid within 30 days.{HOSTILE} Keep it.",
            EVIL_NAME: "# Returns\n\nReturns of refunds are free within 30 days.",
            "plain.md": "# Plain\n\nNothing to see here.",
        },
    )

    def cli(*args: str, stdin: str | None = None):
        done = run_cli(*args, ollama_url=ollama.url, home=home, stdin=stdin)
        assert done.returncode == 0, done.stderr
        shows_no_raw_escapes(done.stdout, done.stderr)
        return done

    ingested = cli("ingest", str(root), "--store", "docs", "--description", f"shop{HOSTILE}")
    assert "stored evil\\x1b]0;t\\x07\\x0aname.md (1 chunk)" in ingested.stderr
    listed = cli("sources", "--store", "docs")
    rows = listed.stdout.splitlines()[1:-1]  # between the root's line and the summary
    assert rows == [line for line in rows if line.count("\t") == 3]
    assert len(rows) == 3
    assert "shop\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x0d" in cli("stores").stdout
    searched = cli("search", "refunds paid within 30 days", "--store", "docs")
    assert "30 days.\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x0d Keep" in searched.stdout
    # JSON keeps every character, escaped: it reads back as the document's text.
    as_json = cli("search", "refunds paid within 30 days", "--store", "docs", "--json")
    texts = [r["text"] for r in json.loads(as_json.stdout)]
    assert any(HOSTILE in t for t in texts)
    asked = cli("ask", "How many days for refunds?", "--store", "docs")
    assert "30 days.\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m" in asked.stdout
    cli("logs")
    shown = cli("logs", "show", "1")
    assert "] evil\\x1b]0;t\\x07\\x0aname.md  chunk " in shown.stdout
    assert "Answer: # Refunds Refunds are paid within 30 days.\\x1b[2J" in shown.stdout
    chatted = cli("chat", "--store", "docs", stdin="How many days for refunds?\n/sources\n/exit\n")
    assert "\\x1b[2J" in chatted.stdout


def test_the_terminal_chat_view_shows_escapes_from_answers_and_sources():
    from rich.console import Console

    from archivist.terminal.screen import RichView

    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    view = RichView(console)
    view.begin()
    view.event(Token(f"Paid in 30 days.{HOSTILE}"))
    view.finish({"answer": "", "citations": [{"n": 1, "source": EVIL_NAME}]})
    view.sources(
        [
            {
                "n": 1,
                "source": EVIL_NAME,
                "score": 0.5,
                "text": f"Paid.{HOSTILE}",
                "cited": True,
                "used": [],
            }
        ]
    )
    shown = console.file.getvalue()
    # Rich styles its own output with escapes; none of the document's reaches the terminal.
    assert "]0;pwned\x07" not in shown and "\x1b[2J" not in shown and "\x9b" not in shown
    assert "Paid in 30 days.\\x1b[2J\\x1b]0;pwned\\x07\\x9b31m\\x0d" in shown
    assert "[1] evil\\x1b]0;t\\x07\\x0aname.md" in shown


def test_unicode_twins_print_apart_and_each_can_be_deleted_by_name(ollama, home, tmp_path):
    composed, decomposed = "caf\u00e9.md", "cafe\u0301.md"
    root = write_files(
        tmp_path / "kb", {composed: "# A\n\nComposed.", decomposed: "# B\n\nDecomposed."}
    )

    def cli(*args: str):
        return run_cli(*args, ollama_url=ollama.url, home=home)

    assert cli("ingest", str(root), "--store", "docs").returncode == 0
    shown = cli("sources", "--store", "docs").stdout.splitlines()[1:-1]
    listed = [line.split("\t")[1] for line in shown]
    assert sorted(listed) == ["cafe\\u0301.md", "caf\u00e9.md"]
    # The name as a terminal types it (composed) removes its exact source, then its twin.
    first = cli("delete", "--store", "docs", "--source", composed)
    assert first.stdout == "Removed 1 chunk of caf\u00e9.md from docs.\n"
    second = cli("delete", "--store", "docs", "--source", composed)
    assert second.stdout == "Removed 1 chunk of cafe\\u0301.md from docs.\n"
    left = json.loads(cli("sources", "--store", "docs", "--json").stdout)
    assert [(s["status"], s["chunks"]) for s in left] == [("new", 0), ("new", 0)]
