"""The faster BM25 vectors and CJK detection give exactly what the plain versions gave."""

import random
import sys
from collections import Counter

import pytest
from conftest import ROOT

from archivist.ingest import splitter
from archivist.tools import sparse

sys.path.insert(0, str(ROOT / "benchmarks"))
import perf  # noqa: E402


def plain_document_vector(text: str) -> tuple[list[int], list[float]]:
    """The vector as it was computed before it was made faster, token by token."""
    tokens = Counter(sparse.tokenize(text))
    counts: dict[int, int] = {}
    for token, n in tokens.items():
        index = sparse.token_id(token)
        counts[index] = counts.get(index, 0) + n
    length_norm = 1 - sparse.B + sparse.B * tokens.total() / sparse.AVG_DOC_TOKENS
    indices = sorted(counts)
    k1 = sparse.K1
    return indices, [counts[i] * (k1 + 1) / (counts[i] + k1 * length_norm) for i in indices]


def plain_is_cjk(text: str, threshold: float = 0.3) -> bool:
    sample = text[:4000]
    letters = sum(1 for ch in sample if not ch.isspace())
    cjk = sum(1 for ch in sample if sparse.cjk_runs().fullmatch(ch))
    return letters > 0 and cjk / letters >= threshold


@pytest.fixture(scope="module")
def mixed_chunks() -> list[str]:
    rng = random.Random(5)
    docs = [perf._chinese(rng, 3000) if i % 2 else perf._english(rng, 3000) for i in range(40)]
    docs.append("Mixed 中文 and English, NW-TX-2290 v1.2.3 códigos\u3000全角\u00a0spaces")
    return [chunk.text for doc in docs for chunk in splitter.split_text(doc)]


def test_document_vectors_are_unchanged(mixed_chunks):
    assert len(mixed_chunks) > 100
    for text in mixed_chunks:
        assert sparse.document_vector(text) == plain_document_vector(text)


def test_tokens_sharing_an_index_add_up_as_before(monkeypatch):
    monkeypatch.setattr(sparse, "_IDS", {"refund": 7, "policy": 7})
    text = "refund policy refund period"
    assert sparse.document_vector(text) == plain_document_vector(text)
    indices, _ = sparse.document_vector(text)
    assert indices.count(7) == 1


def test_cjk_detection_is_unchanged(mixed_chunks):
    samples = mixed_chunks + ["", "   \n\t", "中", "a 中", "\x1c\x1d中文 x", "ab\u2028中文"]
    assert [splitter.is_cjk(t) for t in samples] == [plain_is_cjk(t) for t in samples]
    assert any(splitter.is_cjk(t) for t in samples) and not all(splitter.is_cjk(t) for t in samples)
