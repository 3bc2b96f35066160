"""What an embedding model was trained to read: the task prefixes it expects before a document
or a query, and whether it reads a query's language at all."""

import functools
import re
import unicodedata

from archivist.tools.sparse import CJK

# Models trained with task prefixes retrieve measurably worse without them.
TASK_PREFIXES: dict[str, tuple[str, str]] = {
    "nomic-embed-text": ("search_document: ", "search_query: "),
    "nomic-embed-text-v2-moe": ("search_document: ", "search_query: "),
    # Qwen3-Embedding instructs its queries and reads documents as they are.
    "qwen3-embedding": (
        "",
        "Instruct: Given a web search query, retrieve relevant passages that answer the query"
        "\nQuery:",
    ),
}

# Models trained on English text only. They read other scripts (Chinese, Cyrillic, Arabic…)
# as single characters or unknown pieces: their cosines still rise for a query and a passage
# that share characters, or the odd English word, which looks like meaning without being it;
# hybrid search gives them no say on such a query (see `dense_weight`). Models not named here
# are taken to read every language.
ENGLISH_ONLY_MODELS = frozenset(
    {"all-minilm", "mxbai-embed-large", "nomic-embed-text", "snowflake-arctic-embed"}
)


# Embedding models Ollama serves that were trained on many languages (Chinese among them),
# named when a store's text is in a language its own model does not read.
MULTILINGUAL_MODELS = ("bge-m3", "nomic-embed-text-v2-moe", "qwen3-embedding")
# More than this share of a store's sampled chunks unread by its model earns a notice.
UNREAD_SHARE = 0.5
_SCRIPT_NAMES = {
    "CJK": "Chinese",
    "HIRAGANA": "Japanese",
    "KATAKANA": "Japanese",
    "HANGUL": "Korean",
}


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


def unread_language(model: str | None, texts: list[str]) -> tuple[str, float] | None:
    """The language most of `texts` are written in, and their share, when `model` does not
    read it (more than UNREAD_SHARE of them); None when it reads them."""
    unread = [text for text in texts if not reads(model, text)]
    if not texts or len(unread) <= UNREAD_SHARE * len(texts):
        return None
    scripts: dict[str, int] = {}
    for text in unread:
        for word in _words().findall(text):
            script = unicodedata.name(word[0], "").split(" ")[0]
            if script != "LATIN":
                scripts[script] = scripts.get(script, 0) + 1
    script = max(scripts, key=scripts.__getitem__) if scripts else ""
    name = _SCRIPT_NAMES.get(script, script.capitalize() or "another script than Latin")
    return name, len(unread) / len(texts)


def language_notice(store: str, model: str | None, texts: list[str]) -> str | None:
    """Say so when most of a store's text (`texts`, a sample of its chunks) is in a language
    its embedding model was not trained to read, naming models that read it and the command
    that re-indexes the store with one; None when the model reads it."""
    found = unread_language(model, texts)
    if found is None:
        return None
    language, share = found
    return (
        f"Store '{store}' is mostly {language} ({share:.0%} of its chunks), which its embedding "
        f"model {model} was not trained to read: its dense search matches characters, not "
        "meaning, and hybrid search leans on keywords alone. Models that read it: "
        f"{', '.join(MULTILINGUAL_MODELS)}. Re-index with one: `ollama pull "
        f"{MULTILINGUAL_MODELS[0]}`, then `archivist ingest PATH --store {store} --reindex "
        f"--embed-model {MULTILINGUAL_MODELS[0]}`."
    )
