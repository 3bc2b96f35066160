"""Counted nouns for messages: `1 chunk`, `3 chunks`."""


def count(n: int, noun: str, plural: str | None = None) -> str:
    """Say `n noun` with the noun in the plural unless n is 1 (default plural: noun + s)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
