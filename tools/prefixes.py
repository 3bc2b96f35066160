"""What an embedding model was trained to read: the task prefixes it expects before a document
or a query, and whether it reads a query's language at all."""

import functools
import re
import unicodedata

from archivist.tools.sparse import CJK

# Models trained with task prefixes retrieve measurably worse without them.
TASK_PREFIXES: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_document: ", "search_query: "),
}

# Models trained on English text only. They read other scripts (Chinese, Cyrillic, Arabic…)
# as single characters or unknown pieces: their cosines still rise for a query and a passage
# that share characters, which looks like agreement with BM25 without being understanding
# (see `dense_weight`). Models not named here are taken to read every language.
ENGLISH_ONLY_MODELS = frozenset(
    {"all-minilm", "mxbai-embed-large", "nomic-embed-text", "snowflake-arctic-embed"}
)


def base_name(model: str) -> str:
    """A model's name without its tag or namespace (`library/nomic-embed-text:v1.5` →
    `nomic-embed-text`)."""
    return model.split(":", 1)[0].rsplit("/", 1)[-1]


def default_prefixes(model: str) -> tuple[str, str]:
    """Return the (document, query) prefixes a model was trained with; none for others."""
    return TASK_PREFIXES.get(base_name(model), ("", ""))


@functools.cache
def _words() -> re.Pattern[str]:
    # A run of letters is a word, except in scripts written without spaces (CJK ideographs,
    # kana, Hangul syllables), where each character stands for one.
    return re.compile(f"[{CJK}]|[^\\W\\d_{CJK}]+")


def reads(model: str | None, text: str) -> bool:
    """Whether `model` reads the language `text` is written in: false only for a model trained
    on English alone and a text most of whose words are in another script than Latin (a
    Chinese question naming an API in English is still Chinese)."""
    if model is None or base_name(model) not in ENGLISH_ONLY_MODELS:
        return True
    words = _words().findall(text)
    latin = sum(1 for word in words if unicodedata.name(word[0], "").startswith("LATIN"))
    return 2 * latin >= len(words)
