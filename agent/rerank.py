"""Reranking: a search's top candidates scored by a relevance model, reordered, cut to k.

The scoring itself is handed in (`Scorer`: the probability that a passage is relevant to a
query); the application builds it from an Ollama model's log-probabilities
(`archivist.ollama.scoring.relevance_scorer`). Here only the order, the concurrency and the
timing are decided, so the query engine never talks to Ollama; the search times it
(`archivist.agent.retrieval.SearchResult`).
"""

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archivist.tools.errors import ArchivistError
from archivist.tools.passage import Passage

Scorer = Callable[[str, str], float]
"""Score (query, passage text) as the probability, 0 to 1, that the passage is relevant."""

DEFAULT_PARALLEL = 4


UNREADABLE = (ValueError, TypeError, OverflowError, KeyError, AttributeError, IndexError)
"""What reading a malformed relevance answer raises: an answer that is not JSON
(JSONDecodeError), fields of the wrong type (pydantic's ValidationError), a log-probability
too large to exponentiate (OverflowError)."""


def checked_score(score: Scorer, query: str, text: str) -> float | str:
    """A passage's score, or why the model's answer gave none: a probability must be a
    finite number from 0 to 1 (a NaN, or a logprob above 0, is not one)."""
    try:
        value = score(query, text)
    except UNREADABLE as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}".strip()
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"a score of type {type(value).__name__}"
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return f"a score of {value}, not a probability"
    return float(value)


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
        `retrieval_rank` (its rank before reranking); `rank` is its new place. A passage
        whose answer is unreadable (not JSON, wrong types, a NaN or impossible logprob) gets
        `rerank_score` None and comes after the scored ones, in the search's order; when no
        answer is readable, the search fails, naming the model.
        """
        texts = [p["text"] for p in passages]
        workers = max(1, min(self.parallel, len(texts)))
        from concurrent.futures import ThreadPoolExecutor  # a reranking's, not every search's

        with ThreadPoolExecutor(workers, thread_name_prefix="rerank") as pool:
            scores = list(pool.map(lambda text: checked_score(self.score, query, text), texts))
        problems = [s for s in scores if isinstance(s, str)]
        if problems and len(problems) == len(scores):
            raise ArchivistError(
                f"The rerank model '{self.model}' gave no readable relevance score "
                f"({problems[0]}).",
                "Check that OLLAMA_HOST is Ollama's own address and the model a chat model, "
                "or search without --rerank.",
            )
        order = sorted(
            range(len(passages)),
            key=lambda i: (0, -scores[i], i) if isinstance(scores[i], float) else (1, 0.0, i),
        )[:k]
        return [
            {
                **passages[i],
                "rank": place,
                "rerank_score": round(scores[i], 4) if isinstance(scores[i], float) else None,
                "retrieval_rank": passages[i]["rank"],
            }
            for place, i in enumerate(order, start=1)
        ]
