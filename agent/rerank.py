"""Reranking: a search's top candidates scored by a relevance model, reordered, cut to k.

The scoring itself is handed in (`Scorer`: the probability that a passage is relevant to a
query); the application builds it from an Ollama model's log-probabilities
(`archivist.ollama.scoring.relevance_scorer`). Here only the order, the concurrency and the
timing are decided, so the query engine never talks to Ollama; the search times it
(`archivist.agent.retrieval.SearchResult`).
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archivist.tools.passage import Passage

Scorer = Callable[[str, str], float]
"""Score (query, passage text) as the probability, 0 to 1, that the passage is relevant."""

DEFAULT_PARALLEL = 4


@dataclass(frozen=True)
class Reranker:
    """Reorder a search's candidates by a relevance model's scores (how many candidates a
    search fetches for it is the request's `candidates`)."""

    score: Scorer
    model: str
    """The scoring model's name, as a search's request names it."""
    parallel: int = DEFAULT_PARALLEL
    """How many scoring requests run at once: beyond what the server runs in parallel
    (Ollama's OLLAMA_NUM_PARALLEL) requests only queue up."""

    def __call__(self, query: str, passages: Sequence[Passage], k: int) -> list[Passage]:
        """Score every passage, order them by score (ties keep the search's order), keep k.

        Each passage kept gets `rerank_score` (the model's probability of relevance) and
        `retrieval_rank` (its rank before reranking); `rank` is its new place.
        """
        texts = [p["text"] for p in passages]
        workers = max(1, min(self.parallel, len(texts)))
        from concurrent.futures import ThreadPoolExecutor  # a reranking's, not every search's

        with ThreadPoolExecutor(workers, thread_name_prefix="rerank") as pool:
            scores = list(pool.map(lambda text: self.score(query, text), texts))
        order = sorted(range(len(passages)), key=lambda i: (-scores[i], i))[:k]
        return [
            {
                **passages[i],
                "rank": place,
                "rerank_score": round(scores[i], 4),
                "retrieval_rank": passages[i]["rank"],
            }
            for place, i in enumerate(order, start=1)
        ]
