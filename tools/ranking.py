"""Ranking a store's candidates: fusing the dense and BM25 rankings, settling ties at a cut,
collapsing overlapping chunks into passages, showing duplicates once, and diversity (MMR).

The store fetches the candidates; everything here works on what came back, the same on the
embedded store and on a server.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from archivist.tools.engine import Engine

if TYPE_CHECKING:
    from qdrant_client import models

# How many candidates each ranking contributes to the fusion (at least; 4k for larger k).
FUSION_DEPTH = 20
# How deep a ranking is fetched, at most, to take in all chunks tied at its cut.
MAX_TIE_DEPTH = 1280
# A dense ranking whose best cosine stands less than this far above the mean of its
# candidates cannot tell passages apart (an English model on Chinese text: all cosines close
# together) and gets proportionally less say; measured in benchmarks/retrieval.py.
DENSE_MARGIN = 0.25
# Dense and BM25 rankings that share this many of their candidates both carry information
# about the query (an embedder that cannot read the query's language shares almost none with
# BM25, however its cosines spread), so dense then counts fully; measured in
# benchmarks/retrieval.py on English and Chinese documentation, SQuAD-style and CMRC sets.
# A model trained on English alone can still share candidates with BM25 on a Chinese question
# (it matches a name character by character, and so do the paragraphs about that name), and
# its cosines can still stand apart (the few English words of a mixed question, `props` or
# `KeepAlive`, pull it to the API pages spelling them) without its telling passages apart:
# the store gives such a model's ranking no say on a query in a language it does not read
# (`archivist.tools.prefixes.reads`), so hybrid search there ranks as BM25 does.
DENSE_AGREEMENT = 8
# A page whose name is written in the question's words (`模板引用` for 模板引用访问 DOM 元素,
# `Body - Updates` for updating a body with PATCH) is about what the question asks, where an
# API reference or a tutorial page that answers it too only mentions it. The fusion adds to a
# page's score this many standard deviations times the share of its name's terms the question
# holds (a page named by the question's words alone: all of it). Measured in
# benchmarks/retrieval.py (docs/retrieval.md): from 0.5 to 2 it only moves gold pages up on
# the docs, frameworks and English sets; from 3 a name outweighs what the text says.
NAME_WEIGHT = 2.0


def _standardised(points: Sequence[models.ScoredPoint], depth: int) -> tuple[dict, float]:
    """Return each point's z-score within its ranking, and the z-score of a missing point."""
    scores = [p.score for p in points]
    # A sparse ranking lists only matching chunks; the rest of the depth scores 0.
    padded = scores + [0.0] * (depth - len(scores)) if scores else [0.0]
    mean = sum(padded) / len(padded)
    spread = (sum((s - mean) ** 2 for s in padded) / len(padded)) ** 0.5 or 1.0
    floor = (min(padded) - mean) / spread
    return {p.id: (p.score - mean) / spread for p in points}, floor


def dense_weight(
    dense: Sequence[models.ScoredPoint],
    bm25: Sequence[models.ScoredPoint],
    agreement: bool,
    reads: bool = True,
) -> float:
    """How much say the dense ranking gets beside BM25's (0–1): none when its model does not
    `reads` the query's language (its cosines then measure shared characters and the odd
    English word, which BM25 weighs better).

    Its margin (best cosine above the candidates' mean, against DENSE_MARGIN) says whether
    the cosines tell passages apart; on real documents they rarely stand far apart even when
    dense is right, so with `agreement` the weight is also raised by the candidates the two
    rankings share (against DENSE_AGREEMENT): rankings that agree are both reading the query.
    Only full lists are compared: of a store smaller than the depth, both hold everything.
    """
    if not reads:
        return 0.0
    margin = dense[0].score - sum(p.score for p in dense) / len(dense) if dense else 0.0
    weight = min(1.0, max(margin, 0.0) / DENSE_MARGIN) ** 2
    # Lists shorter than the fetch depth hold every chunk there is (a small store, a rare
    # term): sharing candidates then is chance, not agreement.
    if agreement and len(dense) >= FUSION_DEPTH and len(bm25) >= FUSION_DEPTH:
        shared = len({p.id for p in dense} & {p.id for p in bm25})
        weight = max(weight, min(1.0, shared / DENSE_AGREEMENT))
    return weight


def fuse_zscore(
    dense: Sequence[models.ScoredPoint],
    bm25: Sequence[models.ScoredPoint],
    agreement: bool = True,
    reads: bool = True,
    named: Callable[[models.ScoredPoint], float] | None = None,
) -> list[tuple[models.ScoredPoint, float]]:
    """Fuse two rankings by their standardised scores, trusting dense as `dense_weight` says,
    page by page, a page named in the question's words first (`named`, see `name_share`).

    Rank fusion (RRF) gives a ranking that cannot tell passages apart as much say as one that
    can, which makes the fusion of a weak and a strong ranker worse than the strong one. Here
    each ranking's scores become z-scores over its candidates, so a passage that stands out
    in one ranking keeps that lead, and the dense ranking is weighted by how far its best
    cosine stands above its candidates' mean, or by how many candidates it shares with BM25
    (`agreement`; without it, the margin alone, as earlier releases fused), and not at all when
    its model does not `reads` the query's language.

    The two rankings often find the right page through different chunks (its API table holds
    the question's words, its introduction its meaning), and a chunk missing from a ranking
    scores that ranking's floor: summed chunk by chunk, such a page would lose to a lesser one
    whose one chunk both rankings hold. So a source's best chunk (by its own weighted sum)
    stands for the source and scores the weighted sum of the source's best z-score in each
    ranking, at least its own; its other chunks keep their own sums. Chunks dense alone found
    come after BM25's when dense has no say. With `named` (the share, 0–1, of a chunk's page
    name the question holds), a source's best chunk also gains NAME_WEIGHT times its share.
    """
    depth = max(len(dense), len(bm25), 1)
    points = {p.id: p for p in [*bm25, *dense]}
    # A chunk without a source (none in a store; a caller's own points) is a page of its own.
    sources = {pid: (p.payload or {}).get("source") or ("chunk", pid) for pid, p in points.items()}
    own = dict.fromkeys(points, 0.0)
    pages = dict.fromkeys(sources.values(), 0.0)
    for ranking, weight in ((dense, dense_weight(dense, bm25, agreement, reads)), (bm25, 1.0)):
        z, floor = _standardised(ranking, depth)
        best: dict[Any, float] = {}
        for pid, value in z.items():
            source = sources[pid]
            best[source] = max(best.get(source, value), value)
        for pid in own:
            own[pid] += weight * z.get(pid, floor)
        for source in pages:
            pages[source] += weight * best.get(source, floor)
    fused = dict(own)
    heads: dict[Any, Any] = {}
    for pid in points:  # the first of equal sums, as the sort below keeps them
        head = heads.get(sources[pid])
        if head is None or own[pid] > own[head]:
            heads[sources[pid]] = pid
    for source, pid in heads.items():
        fused[pid] = pages[source]
        if named is not None:
            fused[pid] += NAME_WEIGHT * named(points[pid])
    order = sorted(points, key=lambda pid: (-fused[pid], -own[pid]))
    return [(points[pid], fused[pid]) for pid in order]


def declared_names(metadata: dict[str, Any]) -> list[str]:
    """The names a chunk's page declares in its front matter: its title and subtitle
    (`Button`, `按钮`), each stripped, those it has."""
    return [
        name.strip()
        for name in (metadata.get("title"), metadata.get("subtitle"))
        if isinstance(name, str) and name.strip()
    ]


def page_name(metadata: dict[str, Any]) -> str:
    """The name a chunk's page goes by: its front-matter title and subtitle (`Button 按钮`),
    else its first heading (a VitePress or MkDocs page's `# 模板引用`); '' when it has none."""
    names = declared_names(metadata)
    if names:
        return " ".join(names)
    headings = metadata.get("headings") or []
    first = headings[0] if headings else None
    return first.strip() if isinstance(first, str) else ""


def name_share(
    query_terms: set[int], terms: Callable[[str], frozenset[int]]
) -> Callable[[models.ScoredPoint], float]:
    """For `fuse_zscore`: the share of a point's page name's keyword terms (`terms(name)`,
    the store's own BM25 terms, so names are folded and stemmed as the question is) that the
    question's `query_terms` hold: 1 for `模板引用` asked about with 模板引用访问 DOM 元素, 2 of
    5 for `生命周期和模板引用`, 0 for a page without a name."""
    shares: dict[str, float] = {}

    def share(point: models.ScoredPoint) -> float:
        name = page_name(dict((point.payload or {}).get("metadata") or {}))
        found = shares.get(name)
        if found is None:
            named = terms(name) if name else frozenset()
            found = shares[name] = len(named & query_terms) / len(named) if named else 0.0
        return found

    return share


def fuse_rrf(
    dense: Sequence[models.ScoredPoint], bm25: Sequence[models.ScoredPoint], k: int = 2
) -> list[tuple[models.ScoredPoint, float]]:
    """Fuse two rankings by reciprocal rank, as Qdrant's RRF does (for comparison)."""
    points = {p.id: p for p in [*bm25, *dense]}
    fused = dict.fromkeys(points, 0.0)
    for ranking in (dense, bm25):
        for position, point in enumerate(ranking):
            fused[point.id] += 1 / (position + k)
    return sorted(((points[pid], s) for pid, s in fused.items()), key=lambda x: -x[1])


@dataclass
class _Passage:
    """A retrieved span of one source: one chunk, or overlapping chunks merged."""

    score: float
    source: str
    chunk_id: str
    text: str
    metadata: dict[str, Any]
    section: tuple
    start: int | None
    end: int | None
    vector: list[float] | None

    def overlaps(self, other: _Passage) -> bool:
        return (
            self.section == other.section
            and self.start is not None
            and other.start is not None
            and self.start < other.end
            and other.start < self.end
        )

    def absorb(self, other: _Passage) -> None:
        """Extend this passage's text and span with an overlapping chunk's."""
        if len(self.text) != self.end - self.start or len(other.text) != other.end - other.start:
            return  # offsets do not describe the texts: keep the better chunk as it is
        if other.start < self.start:
            self.text = other.text[: self.start - other.start] + self.text
            self.start = other.start
        if other.end > self.end:
            self.text += other.text[self.end - other.start :]
            self.end = other.end
        self.metadata = {
            **self.metadata,
            "start": self.start,
            "end": self.end,
            "chunk_ids": [*self.metadata.get("chunk_ids", [self.chunk_id]), other.chunk_id],
        }


def collapse_overlaps(
    candidates: Sequence[tuple[models.ScoredPoint, float]], using: str
) -> list[_Passage]:
    """Merge chunks of one source whose [start, end) spans overlap into one passage.

    Chunks overlap by design (the splitter's overlap), so a passage often comes back as two
    neighbouring chunks; the merged passage keeps the better chunk's rank, score and id.
    `using` names the dense vector, which `select_mmr` compares passages by.
    """
    passages: list[_Passage] = []
    for point, score in candidates:
        payload = point.payload or {}
        metadata = dict(payload.get("metadata") or {})
        section = tuple(
            sorted(
                (key, repr(value))
                for key, value in metadata.items()
                if key not in ("start", "end", "headings")
            )
        )
        vector = point.vector.get(using) if isinstance(point.vector, dict) else None
        passage = _Passage(
            score=score,
            source=payload["source"],
            chunk_id=str(point.id),
            text=payload["text"],
            metadata=metadata,
            section=(payload["source"], payload.get("doc_hash"), section),
            start=metadata.get("start"),
            end=metadata.get("end"),
            vector=vector,
        )
        for kept in passages:
            if kept.overlaps(passage):
                kept.absorb(passage)
                break
        else:
            passages.append(passage)
    return passages


def merge_duplicates(passages: list[_Passage]) -> list[_Passage]:
    """Show a text found in several sources once (versioned docs repeat pages): the best
    ranked passage stays, and lists the other sources in its metadata as `also_in`."""
    kept: dict[str, _Passage] = {}
    for passage in passages:
        key = " ".join(passage.text.split()).casefold()
        first = kept.get(key)
        if first is None:
            kept[key] = passage
        elif passage.source != first.source and passage.source not in first.metadata.get(
            "also_in", []
        ):
            first.metadata = {
                **first.metadata,
                "also_in": [*first.metadata.get("also_in", []), passage.source],
            }
    return list(kept.values())


def diversify_sources(passages: Sequence[_Passage], k: int) -> list[_Passage]:
    """Return `k` passages, each source's best first: one page of many matching chunks (a
    changelog, a long reference) cannot fill the list. The source's other passages come after
    every source's best, so `k` are still returned when the candidates hold fewer sources;
    those left out are folded under their source's best, listed in its metadata as
    `more_from_source` (chunk ids, best first), as `merge_duplicates` lists `also_in`."""
    heads: dict[str, _Passage] = {}
    others: list[_Passage] = []
    for passage in passages:
        if passage.source in heads:
            others.append(passage)
        else:
            heads[passage.source] = passage
    ordered = [*heads.values(), *others]
    kept = ordered[:k]
    shown = {id(p) for p in kept}
    for passage in ordered[k:]:
        head = heads[passage.source]
        if id(head) in shown and passage is not head:
            head.metadata = {
                **head.metadata,
                "more_from_source": [*head.metadata.get("more_from_source", []), passage.chunk_id],
            }
    return kept


def select_mmr(
    passages: Sequence[_Passage], query_vector: Sequence[float] | None, k: int, weight: float
) -> list[_Passage]:
    """Pick `k` passages by maximal marginal relevance: relevant, and unlike those picked.

    `weight` balances the two: 1 keeps the relevance order, 0 seeks only diversity. Relevance
    is the score rescaled to 0–1 over the candidates; likeness is the cosine of dense vectors.
    """
    if not passages:
        return []
    scores = [p.score for p in passages]
    low, high = min(scores), max(scores)
    relevance = [(s - low) / (high - low) if high > low else 1.0 for s in scores]
    remaining = list(range(len(passages)))
    chosen: list[int] = []
    while remaining and len(chosen) < k:

        def value(i: int) -> float:
            likeness = max((_cosine(passages[i], passages[j]) for j in chosen), default=0.0)
            return weight * relevance[i] - (1 - weight) * likeness

        best = max(remaining, key=value)
        chosen.append(best)
        remaining.remove(best)
    return [passages[i] for i in chosen]


def _cosine(a: _Passage, b: _Passage) -> float:
    if not a.vector or not b.vector:
        return 0.0
    dot = sum(x * y for x, y in zip(a.vector, b.vector, strict=False))
    norm = (sum(x * x for x in a.vector) * sum(y * y for y in b.vector)) ** 0.5
    return dot / norm if norm else 0.0


def settle_ties(
    engine: Engine,
    collection: str,
    request: models.QueryRequest,
    points: list[models.ScoredPoint],
    depth: int,
) -> list[models.ScoredPoint]:
    """Return a ranking's first `depth` points, equal scores in chunk id order.

    The engine orders equal scores as its segments happen to lie, so two stores of the
    same chunks (or one store before and after a rewrite) could disagree: BM25 gives every
    chunk with one rare term once the same score. Each ranking is fetched one deeper than
    needed; when the score just past the cut equals the score at it, the tie is fetched
    whole (up to MAX_TIE_DEPTH) so the cut falls in the same place every time.
    """
    limit = request.limit or depth
    while (
        len(points) == limit > depth
        and limit < MAX_TIE_DEPTH
        and tie_key(points[-1].score) == tie_key(points[depth - 1].score)
    ):
        limit = min(limit * 4, MAX_TIE_DEPTH)
        deeper = request.model_copy(update={"limit": limit})
        points = engine.query_batch_points(collection, requests=[deeper])[0].points
    points = sorted(points, key=lambda p: (-tie_key(p.score), str(p.id)))
    return points[:depth]


def tie_key(score: float) -> float:
    """A score rounded past the engine's float noise, for telling ties apart."""
    return round(score, 6)
