"""What people read: counted nouns (`1 chunk`, `1,394 chunks`), numbers, the names closest to
a mistyped one, a heading's title without its markup."""

import difflib
from collections.abc import Iterable


def number(n: int) -> str:
    """Write a count with thousands separators, as every count shown to a person is: `1,394`."""
    return f"{n:,}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """Say `n noun` with the noun in the plural unless n is 1 (default plural: noun + s)."""
    return f"{number(n)} {noun if n == 1 else plural or noun + 's'}"


def closest(typed: str, names: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """The names most like a mistyped one (case ignored), likest first, as a mistyped command
    gets "did you mean"; none as close as `cutoff` (difflib's ratio, 0 to 1)."""
    folded: dict[str, str] = {}
    for name in names:
        folded.setdefault(name.lower(), name)
    found = difflib.get_close_matches(typed.lower(), folded, n=n, cutoff=cutoff)
    return [folded[name] for name in found]


def did_you_mean(names: list[str]) -> str:
    """` Did you mean 'a'?` (or `'a' or 'b'?`): '' when there is none to offer."""
    if not names:
        return ""
    quoted = [f"'{name}'" for name in names]
    either = quoted[0] if len(quoted) == 1 else ", ".join(quoted[:-1]) + f" or {quoted[-1]}"
    return f" Did you mean {either}?"


def heading_title(written: str) -> str:
    """A Markdown heading's title as people read it: without the attribute list VitePress,
    mkdocs and Pandoc let a heading end with (`Lifecycle {#lifecycle}`, `{ #id .class }`)."""
    # By hand, not by a pattern: one pass over the title, however long it is.
    if not written.endswith("}"):
        return written
    opening = written.rfind("{")
    inner = written[opening + 1 : -1]
    if opening <= 0 or "}" in inner or inner.strip()[:1] not in ("#", "."):
        return written
    return written[:opening].rstrip() or written
