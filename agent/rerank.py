"""Reranking: a search's top candidates scored by a relevance model, reordered, cut to k.

The scoring itself is handed in (`Scorer`: the probability that a passage is relevant to a
query); the application builds it from an Ollama model's log-probabilities
(`archivist.ollama.scoring.relevance_scorer`). Here only the order, the concurrency and the
timing are decided, so the query engine never talks to Ollama.
"""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archivist.tools.passage import Passage

Scorer = Callable[[str, str], float]
"""Score (query, passage text) as the probability, 0 to 1, that the passage is relevant."""

DEFAULT_CANDIDATES = 20
DEFAULT_PARALLEL = 4


class Reranked(list):
    """A search's results after reranking (a list of passages, best first), with what the
    reranking cost: `model` and `ms`, its wall time."""

    def __init__(self, passages: Sequence[Passage], model: str, ms: float) -> None:
        super().__init__(passages)
        self.model = model
        self.ms = ms


@dataclass(frozen=True)
class Reranker:
    """Reorder a search's candidates by a relevance model's scores."""

    score: Scorer
    model: str
    """The scoring model's name, as the search line shows it."""
    candidates: int = DEFAULT_CANDIDATES
    """How many of the search's best results are scored (the search asks for this many)."""
    parallel: int = DEFAULT_PARALLEL
    """How many scoring requests run at once: beyond what the server runs in parallel
    (Ollama's OLLAMA_NUM_PARALLEL) requests only queue up."""

    def fetch(self, k: int) -> int:
        """How many results to ask the search for, to return `k` after reranking."""
        return max(k, self.candidates)

    def __call__(self, query: str, passages: Sequence[Passage], k: int) -> Reranked:
        """Score every passage, order them by score (ties keep the search's order), keep k.

        Each passage kept gets `rerank_score` (the model's probability of relevance) and
        `retrieval_rank` (its rank before reranking); `rank` is its new place.
        """
        started = time.perf_counter()
        texts = [p["text"] for p in passages]
        workers = max(1, min(self.parallel, len(texts)))
        from concurrent.futures import ThreadPoolExecutor  # a reranking's, not every search's

        with ThreadPoolExecutor(workers, thread_name_prefix="rerank") as pool:
            scores = list(pool.map(lambda text: self.score(query, text), texts))
        order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))[:k]
        ranked: list[Passage] = [
            {
                **passages[i],
                "rank": place,
                "rerank_score": round(scores[i], 4),
                "retrieval_rank": passages[i]["rank"],
            }
            for place, i in enumerate(order, start=1)
        ]
        return Reranked(ranked, self.model, round((time.perf_counter() - started) * 1000, 1))
