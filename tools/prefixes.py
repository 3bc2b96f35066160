"""Embedding task prefixes: what a model was trained to read before a document or a query."""

# Models trained with task prefixes retrieve measurably worse without them.
TASK_PREFIXES: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_document: ", "search_query: "),
}


def default_prefixes(model: str) -> tuple[str, str]:
    """Return the (document, query) prefixes a model was trained with; none for others."""
    base = model.split(":", 1)[0].rsplit("/", 1)[-1]
    return TASK_PREFIXES.get(base, ("", ""))
