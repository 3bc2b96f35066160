"""BM25-style sparse vectors, under the scheme a store's fingerprint names.

Qdrant applies the IDF part itself (the collection's sparse vector has the IDF modifier), so a
document vector holds only BM25's saturated term frequencies and a query vector holds ones.

New stores use qdrant-edge's BM25 encoder (multilingual tokenizer, English Snowball stemming
and stop words; measured better than ours in docs/retrieval.md) over text whose Traditional
Chinese is folded into Simplified, Taiwan words into mainland ones (OpenCC's `tw2sp`, then
the Taiwan software words it leaves, `taiwan_terms.tsv`), so a question typed in either
script finds text written in the other, with CJK character bigrams beside the tokenizer's
words. Stores built before keep their scheme: the folding without bigrams, the folding with
OpenCC's words alone, qdrant-edge's encoder without the folding, or our own tokenizer
(Latin words, codes, CJK bigrams), which `encoder` still gives them, so they are queried and
added to as they were built.
"""

import functools
import operator
import re
import struct
import zlib
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from archivist.tools.errors import ArchivistError

# The scheme names a fingerprint records; a scheme's vectors never change under its name.
EDGE_SCHEME = "bm25-qdrant-multilingual-en-numbers-v1"
FOLDED_SCHEME = "bm25-qdrant-multilingual-en-numbers-zhfold-v1"
FOLDED_TW_SCHEME = "bm25-qdrant-multilingual-en-numbers-zhfold-v2"
BIGRAM_SCHEME = "bm25-qdrant-multilingual-en-numbers-zhfold-v2-cjkbigrams-v1"
LEGACY_SCHEME = "bm25-crc32-cjkbigram-v1"
DEFAULT_SCHEME = BIGRAM_SCHEME

K1 = 1.2
B = 0.75
AVG_DOC_TOKENS = 256.0

# Kana, CJK ideographs (extension A, unified, compatibility) and Hangul: indexed as character
# bigrams here, and given smaller chunks by the splitter, which imports this one definition.
CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"


@functools.cache
def cjk_runs() -> re.Pattern[str]:
    """Runs of CJK characters. Compiled when first used, as `_words` is: a class of these
    ranges takes ~8 ms to compile, which a command that never splits or tokenizes text (a
    listing, a search of a store under the default scheme) need not pay."""
    return re.compile(f"[{CJK}]+")


@functools.cache
def _words() -> re.Pattern[str]:
    return re.compile(f"[^\\W_{CJK}]+")


# Product codes and identifiers ("NW-TX-2290", "v1.2.3") also count as one token each.
# A code starts where a word does and never gives back characters (possessive), so finding
# them takes one pass instead of backtracking through every long word or CJK run.
_CODE = re.compile(r"(?<![^\W_])[^\W_]++(?:[-_./][^\W_]++)+")
# Function words carry no topic; left in, they let long chunks outrank the right one.
STOP_WORDS = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in "
    "into is it its may me might my no not of on or our shall should so than that the their "
    "them then there these they this those to us was we were what when where which who whom "
    "why will with would you your".split()
)


# A corpus repeats its words, so each word's term (stem, or "" for a stop word) and each
# token's index are computed once and looked up after; the caches are emptied when they grow
# past CACHE_LIMIT entries, so memory stays bounded on any vocabulary.
CACHE_LIMIT = 1 << 18
_TERMS: dict[str, str] = {}
_IDS: dict[str, int] = {}
_CODE_MARK = re.compile(r"[^\W_][-_./][^\W_]")


def _stem(word: str) -> str:
    """Fold plain English plurals ("refunds" → "refund"), leaving "class" and "status" alone."""
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-3] + "y" if word.endswith("ies") else word[:-1]
    return word


def _terms(words: list[str]) -> list[str]:
    terms = _TERMS
    missing = set(words).difference(terms)
    if missing:
        if len(terms) + len(missing) > CACHE_LIMIT:
            terms.clear()
            missing = set(words)
        for word in missing:
            terms[word] = "" if word in STOP_WORDS else _stem(word)
    return [term for term in map(terms.__getitem__, words) if term]


def tokenize(text: str) -> list[str]:
    """Split text into lowercase word stems, whole codes, and CJK character bigrams."""
    lowered = text.lower()
    tokens = _terms(_words().findall(lowered))
    cjk = cjk_runs()
    if _CODE_MARK.search(lowered):
        tokens.extend(code for code in _CODE.findall(lowered) if not cjk.search(code))
    for run in cjk.findall(lowered):
        if len(run) == 1:
            tokens.append(run)
        else:
            tokens.extend(map(operator.add, run, run[1:]))  # its character bigrams
    return tokens


def token_id(token: str) -> int:
    """Map a token to a stable sparse index (the same in every process and release)."""
    found = _IDS.get(token)
    if found is None:
        if len(_IDS) >= CACHE_LIMIT:
            _IDS.clear()
        found = _IDS[token] = zlib.crc32(token.encode("utf-8")) & 0x7FFFFFFF
    return found


def document_vector(text: str) -> tuple[list[int], list[float]]:
    """Return the sparse vector of a stored chunk: BM25 term-frequency weights."""
    tokens = Counter(tokenize(text))
    ids = _IDS
    try:
        indexes = list(map(ids.__getitem__, tokens))
    except KeyError:  # a token not seen before
        indexes = [token_id(token) for token in tokens]
    counts = dict(zip(indexes, tokens.values(), strict=True))
    if len(counts) < len(tokens):  # two tokens share an index: add up their counts
        counts = {}
        for index, n in zip(indexes, tokens.values(), strict=True):
            counts[index] = counts.get(index, 0) + n
    length_norm = 1 - B + B * tokens.total() / AVG_DOC_TOKENS
    # Most tokens occur once or twice: each distinct count's weight is worked out once.
    weights = {n: n * (K1 + 1) / (n + K1 * length_norm) for n in set(counts.values())}
    indices = sorted(counts)
    return indices, list(map(weights.__getitem__, map(counts.__getitem__, indices)))


def query_vector(text: str) -> tuple[list[int], list[float]]:
    """Return the sparse vector of a query: each distinct token once."""
    indices = sorted({token_id(t) for t in tokenize(text)})
    return indices, [1.0] * len(indices)


@functools.cache
def _edge_model() -> Any:
    """qdrant-edge's BM25 model for EDGE_SCHEME, built once per process on first use."""
    import qdrant_edge as qe

    # k=1.2, b=0.75 and avg_len=256 are the encoder's defaults, the same as ours.
    return qe.Bm25(
        qe.Bm25Config(
            tokenizer=qe.TokenizerType.Multilingual,
            language="english",
            stemmer=qe.SnowballParams(qe.SnowballLanguage.English),
        )
    )


# qdrant-edge's multilingual tokenizer drops a number standing alone ("error 404", the 2290 of
# "NW-TX-2290", "ISO 9001", "3.14"), so keyword search could not tell order 2290 from 2291.
# EDGE_SCHEME adds each such number as a term of its own; numbers joined to Latin letters
# ("E404", "v1.2", "mp3") are already Edge's terms.
# A number starts at a digit not preceded by a letter, a digit or a point. Written digit
# first (the look-behind then spans that digit), so the regex engine skips to the next digit
# instead of trying the look-behind at every character: the same matches in half the time.
_NUMBER = re.compile(r"\d(?<![A-Za-z0-9.]\d)\d*(?:\.\d+)*(?![A-Za-z0-9])")


def _numbers(text: str) -> Counter[str]:
    return Counter(_NUMBER.findall(text))


@functools.cache
def _number_weight(n: int) -> float:
    # Rounded to float32, as the store keeps it, so a stored vector equals a computed one.
    return struct.unpack("f", struct.pack("f", n * (K1 + 1) / (n + K1)))[0]


def _edge_document(text: str) -> tuple[list[int], list[float]]:
    vector = _edge_model().embed_document(text)
    numbers = _numbers(text)
    if not numbers:
        return vector.indices, vector.values
    # BM25's saturation of the count alone (b = 0: Edge does not say the length it counted):
    # 1.0 for a number found once, as for a word in a chunk of average length.
    added = ((token_id(number), _number_weight(n)) for number, n in numbers.items())
    return _adding(vector.indices, vector.values, added)


def _adding(
    indices: list[int], values: list[float], added: Iterable[tuple[int, float]]
) -> tuple[list[int], list[float]]:
    """A sparse vector with the (term, weight) pairs `added`, a term it holds already (a
    number or a bigram that is also a word) adding up; its terms in order."""
    weights = dict(zip(indices, values, strict=True))
    get = weights.get
    for index, weight in added:
        weights[index] = get(index, 0.0) + weight
    order = sorted(weights)
    return order, list(map(weights.__getitem__, order))


def _edge_query(text: str) -> tuple[list[int], list[float]]:
    indices = set(_edge_model().embed_query(text).indices)
    indices.update(map(token_id, _numbers(text)))
    return sorted(indices), [1.0] * len(indices)


TRADITIONAL_SHARE = 20
"""Text is read as Traditional Chinese when one of its Chinese characters in this many (or
more) is written differently in Simplified."""


@functools.cache
def _converters() -> tuple[Any, Any]:
    import opencc

    # t2s finds Traditional characters; tw2sp also turns Taiwan words into mainland ones
    # (載入 → 加载, 軟體 → 软件), which t2s alone leaves as Traditional words in Simplified.
    return opencc.OpenCC("t2s"), opencc.OpenCC("tw2sp")


# Taiwan software words tw2sp leaves (全域, 回饋, 清單) and their mainland words (全局, 反馈,
# 列表): a small table of our own, part of FOLDED_TW_SCHEME (see the file's header).
TAIWAN_TERMS = Path(__file__).with_name("taiwan_terms.tsv")


@functools.cache
def taiwan_terms() -> tuple[dict[str, str], re.Pattern[str] | None]:
    """The table's words as tw2sp leaves them (儲存格 → 保存格) and their mainland words, and a
    pattern finding them, longest first; read when first used."""
    _, taiwan = _converters()
    terms = {}
    for line in TAIWAN_TERMS.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            word, mainland = line.split("\t")
            terms[taiwan.convert(word)] = mainland
    if not terms:
        return terms, None
    return terms, re.compile("|".join(map(re.escape, sorted(terms, key=len, reverse=True))))


def fold_chinese(text: str, terms: bool = True) -> str:
    """Text with its Traditional Chinese written in Simplified characters and mainland words,
    for keyword indexing only; Simplified text and other scripts are returned as they are.

    Only text written in Traditional is converted (at least one Chinese character in 20
    differs in Simplified; Traditional prose differs in one of four or so): tw2sp also reads
    Simplified words as Taiwan ones (程序, a program on the mainland, would become 进程, a
    process), so folding Simplified text too, or a Simplified page quoting one Traditional
    name, would part a mainland question from the page it asks about. With `terms` (the
    scheme of new stores) the Taiwan software words tw2sp leaves are then written as the
    mainland's (`taiwan_terms.tsv`); without, as FOLDED_SCHEME stores were built."""
    runs = cjk_runs().findall(text)
    if not runs:
        return text
    simplified, taiwan = _converters()
    written = "".join(runs)
    converted = simplified.convert(written)
    if converted == written:
        return text
    if len(converted) == len(written):
        differing = sum(1 for a, b in zip(written, converted, strict=True) if a != b)
        if differing * TRADITIONAL_SHARE < len(written):
            return text
    folded = taiwan.convert(text)
    if terms:
        mainland, pattern = taiwan_terms()
        if pattern is not None:
            folded = pattern.sub(lambda found: mainland[found.group()], folded)
    return folded


def _folded_document(text: str) -> tuple[list[int], list[float]]:
    return _edge_document(fold_chinese(text, terms=False))


def _folded_query(text: str) -> tuple[list[int], list[float]]:
    return _edge_query(fold_chinese(text, terms=False))


def _folded_tw_document(text: str) -> tuple[list[int], list[float]]:
    return _edge_document(fold_chinese(text))


def _folded_tw_query(text: str) -> tuple[list[int], list[float]]:
    return _edge_query(fold_chinese(text))


# BIGRAM_SCHEME adds each pair of neighbouring CJK characters as a term beside the words the
# tokenizer segments: a segmentation that parts a word differently in the question and in the
# page (`给页面加水印` read as 加水 "add water" and 印, the page's `水印` as one word) still
# shares its bigrams. A document's bigram counts weigh as its numbers' do (BM25's saturation of
# the count); a question's weigh BIGRAM_QUERY_WEIGHT each, less than its words' 1: they back
# the words up, and a question's bigrams outnumber its words. Measured in
# benchmarks/retrieval.py (docs/retrieval.md): 1 and 0.5 let bigrams outvote words.
BIGRAM_QUERY_WEIGHT = 0.3


# Each bigram's term, computed once (emptied past CACHE_LIMIT entries, as `_IDS` is).
_BIGRAM_IDS: dict[str, int] = {}


def _bigram_ids(text: str) -> dict[int, int]:
    """The term of each CJK character bigram of `text`, and how often it occurs."""
    pairs: Counter[str] = Counter()
    for run in cjk_runs().findall(text):
        if len(run) > 1:
            pairs.update(map(operator.add, run, run[1:]))
    ids = _BIGRAM_IDS
    if len(ids) + len(pairs) > CACHE_LIMIT:
        ids.clear()
    for pair in pairs:
        if pair not in ids:
            ids[pair] = zlib.crc32(("cjk2:" + pair).encode("utf-8")) & 0x7FFFFFFF
    found = dict(zip(map(ids.__getitem__, pairs), pairs.values(), strict=True))
    if len(found) < len(pairs):  # two bigrams share a term: add up their counts
        found = {}
        for pair, n in pairs.items():
            found[ids[pair]] = found.get(ids[pair], 0) + n
    return found


def _bigram_document(text: str) -> tuple[list[int], list[float]]:
    return _with_bigrams(text, _edge_document, _number_weight)


def _bigram_query(text: str) -> tuple[list[int], list[float]]:
    return _with_bigrams(text, _edge_query, lambda _: BIGRAM_QUERY_WEIGHT)


def _with_bigrams(
    text: str,
    words: Callable[[str], tuple[list[int], list[float]]],
    weight: Callable[[int], float],
) -> tuple[list[int], list[float]]:
    """`words`' vector of the folded text with its CJK bigrams added, each weighing
    `weight(count)` (`_adding`)."""
    folded = fold_chinese(text)
    indices, values = words(folded)
    bigrams = _bigram_ids(folded)
    if not bigrams:
        return indices, values
    return _adding(indices, values, ((index, weight(n)) for index, n in bigrams.items()))


class SparseEncoder:
    """One scheme's sparse vectors: `document(text)` for a stored chunk, `query(text)` for a
    query, each `(indices, values)`. Pickled by its scheme's name, so another process rebuilds
    its own."""

    def __init__(
        self,
        scheme: str,
        document: Callable[[str], tuple[list[int], list[float]]],
        query: Callable[[str], tuple[list[int], list[float]]],
    ) -> None:
        self.scheme = scheme
        self.document = document
        self.query = query

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return encoder, (self.scheme,)

    def __repr__(self) -> str:
        return f"SparseEncoder({self.scheme!r})"


_ENCODERS = {
    BIGRAM_SCHEME: SparseEncoder(BIGRAM_SCHEME, _bigram_document, _bigram_query),
    FOLDED_TW_SCHEME: SparseEncoder(FOLDED_TW_SCHEME, _folded_tw_document, _folded_tw_query),
    FOLDED_SCHEME: SparseEncoder(FOLDED_SCHEME, _folded_document, _folded_query),
    EDGE_SCHEME: SparseEncoder(EDGE_SCHEME, _edge_document, _edge_query),
    LEGACY_SCHEME: SparseEncoder(LEGACY_SCHEME, document_vector, query_vector),
}
SCHEMES = tuple(_ENCODERS)
# Schemes that differ only in how CJK text is folded and split: on text without a CJK
# character their vectors are the same, so a store of one of them holding no CJK text gains
# nothing from a reindex to another (tested on the encoders themselves).
SAME_WITHOUT_CJK = frozenset({EDGE_SCHEME, FOLDED_SCHEME, FOLDED_TW_SCHEME, BIGRAM_SCHEME})


def holds_cjk(texts: Iterable[str]) -> bool:
    """Whether any of `texts` holds a CJK character (kana, ideograph or Hangul)."""
    find = cjk_runs().search
    return any(find(text) for text in texts)


def encoder(scheme: str) -> SparseEncoder:
    """Return the encoder of a sparse scheme; refuse a scheme this release does not know."""
    found = _ENCODERS.get(scheme)
    if found is None:
        raise ArchivistError(
            f"Keyword vectors of the scheme {scheme!r} cannot be made by this release of "
            f"Archivist (it knows {', '.join(SCHEMES)}).",
            "Upgrade Archivist, or rebuild the store with: archivist ingest PATH --store STORE "
            "--reindex",
        )
    return found


def document_vectors(texts: list[str], scheme: str) -> list[tuple[list[int], list[float]]]:
    """Return the document vectors of `texts` under the sparse `scheme` a store names."""
    document = encoder(scheme).document
    return [document(text) for text in texts]
