"""The terminal chat loop: a small function over callables, so tests can script it."""

from collections.abc import Callable
from typing import Any

from tools.errors import ArchivistError

HELP = "Ask a question, or: /help, /new (start a new conversation), /exit (or Ctrl-D)."


def render_answer(result: dict[str, Any]) -> str:
    """Render a turn for the terminal: tool lines, the answer, the cited sources."""
    lines = []
    for call in result["tool_calls"]:
        query = call["args"].get("query", "")
        found = f"error: {call['error']}" if "error" in call else f"{len(call['results'])} results"
        lines.append(f'{call["name"]}("{query}") · {found} · {call["latency_ms"]:.0f} ms')
    lines.append(result["answer"])
    if result["citations"]:
        lines.append(
            "Sources: " + "  ".join(f"[{c['n']}] {c['source']}" for c in result["citations"])
        )
    if result.get("invalid_citations"):
        cited = ", ".join(f"[{n}]" for n in result["invalid_citations"])
        lines.append(f"Warning: {cited} cited but not retrieved.")
    return "\n".join(lines)


def chat_loop(
    answer: Callable[[str], dict[str, Any]],
    new_conversation: Callable[[], None],
    read: Callable[[str], str],
    write: Callable[[str], None],
) -> int:
    """Read questions until /exit or end of input; answer each; return the exit status."""
    while True:
        try:
            line = read("> ").strip()
        except EOFError:
            return 0
        if not line:
            continue
        if line in ("/exit", "/quit"):
            return 0
        if line == "/help":
            write(HELP)
        elif line == "/new":
            new_conversation()
            write("Started a new conversation.")
        elif line.startswith("/"):
            write(f"Unknown command {line.split()[0]}. {HELP}")
        else:
            try:
                write(render_answer(answer(line)))
            except ArchivistError as exc:
                write(f"Error: {exc}")
