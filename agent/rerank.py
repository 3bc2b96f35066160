"""Reranking: a search's top candidates scored by a relevance model, reordered, cut to k.

The scoring itself is handed in (`Scorer`: the probability that a passage is relevant to a
query); the application builds it from an Ollama model's log-probabilities
(`archivist.models.relevance_scorer`). Here only the order, the concurrency and the timing
are decided, so the query engine never talks to Ollama.
"""

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from archivist.tools.errors import ArchivistError
from archivist.tools.passage import Passage

Scorer = Callable[[str, str], float]
"""Score (query, passage text) as the probability, 0 to 1, that the passage is relevant."""

DEFAULT_CANDIDATES = 20
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
        `retrieval_rank` (its rank before reranking); `rank` is its new place. A passage
        whose answer is unreadable (not JSON, wrong types, a NaN or impossible logprob) gets
        `rerank_score` None and comes after the scored ones, in the search's order; when no
        answer is readable, the search fails, naming the model.
        """
        started = time.perf_counter()
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
        ranked: list[Passage] = [
            {
                **passages[i],
                "rank": place,
                "rerank_score": round(scores[i], 4) if isinstance(scores[i], float) else None,
                "retrieval_rank": passages[i]["rank"],
            }
            for place, i in enumerate(order, start=1)
        ]
        return Reranked(ranked, self.model, round((time.perf_counter() - started) * 1000, 1))
