"""What a search asks besides its query: one record, resolved once from the settings.

`SearchRequest` travels whole from where the settings are read (`Archivist.search_request`)
through the retrieval tool and the reranker down to the store's search. A new search option
is a field here and a flag on the command line; nothing in between lists it again.
"""

import math
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

from archivist.tools.errors import ArchivistError

SearchMode = Literal["hybrid", "dense", "sparse"]
# `zscore`: standardised scores, dense weighted by its margin or its agreement with BM25 (the
# default); `margin`: the same by the margin alone; `rrf`: reciprocal rank.
Fusion = Literal["zscore", "margin", "rrf"]
MODES: tuple[str, ...] = get_args(SearchMode)
FUSIONS: tuple[str, ...] = get_args(Fusion)
DEFAULT_CANDIDATES = 20


@dataclass(frozen=True)
class SearchRequest:
    """A search's options (all but its query), checked as they are made."""

    k: int = 5
    """How many passages the search returns."""
    mode: SearchMode = "hybrid"
    """`hybrid` fuses the dense and BM25 rankings; `dense` or `sparse` use one alone."""
    source: str | None = None
    """Search only this source: a file name, a folder, a root's label or a name prefix
    (`KnowledgeStore.match_sources` says which sources it refers to)."""
    min_score: float | None = None
    """Drop passages scoring below this, in the mode's own score."""
    mmr: float | None = None
    """Re-rank for diversity: 1 = relevance only, 0 = diversity only."""
    rerank: str | None = None
    """The model that reranks the search's best candidates (None: no reranking)."""
    candidates: int = DEFAULT_CANDIDATES
    """With `rerank`: how many of the search's best results are scored."""
    fusion: Fusion = "zscore"
    """How `hybrid` fuses its two rankings (`KnowledgeStore.search`)."""
    diversify: bool = True
    """Put each source's best passage before any source's second."""

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ArchivistError(f"k={self.k!r} is not a number of results.", "Give 1 or more.")
        if self.mode not in MODES:
            raise ArchivistError(
                f"Unknown mode '{self.mode}'.", "Use --mode hybrid, dense or sparse."
            )
        if self.fusion not in FUSIONS:
            raise ArchivistError(f"Unknown fusion '{self.fusion}'.", "Use zscore, margin or rrf.")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise ArchivistError(
                f"--min-score {self.min_score} is not a score.", "Give a finite number, like 0.3."
            )
        if self.mmr is not None and not 0 <= self.mmr <= 1:
            raise ArchivistError(f"--mmr {self.mmr} is not a weight.", "Give one from 0 to 1.")
        if self.candidates < 1:
            raise ArchivistError(
                f"--rerank-candidates {self.candidates} is not a number of candidates.",
                "Give 1 or more.",
            )

    @property
    def fetched(self) -> int:
        """How many passages the store returns: `k`, or the candidates a reranker scores."""
        return max(self.k, self.candidates) if self.rerank else self.k

    def with_options(self, **options: Any) -> "SearchRequest":
        """This request with some options changed (None leaves one as it is; `rerank`: False
        turns reranking off); an unknown option is refused, naming the known ones."""
        known = option_names()
        unknown = sorted(set(options) - set(known))
        if unknown:
            raise ArchivistError(
                f"Unknown search option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}.",
                f"The search options are {', '.join(known)}.",
            )
        changed = {key: value for key, value in options.items() if value is not None}
        if changed.get("rerank") is False:
            changed["rerank"] = None
        elif changed.get("rerank") is True:
            del changed["rerank"]  # reranking as the request says
        return self if not changed else replace(self, **changed)


DEFAULT = SearchRequest()
"""The options of a search that names none."""


def option_names() -> tuple[str, ...]:
    """The names of a search's options, as `SearchRequest` has them."""
    return tuple(f.name for f in fields(SearchRequest))
