"""Qdrant's records as the embedded store passes them: points, filters, queries, results.

They have the names and fields of the `qdrant_client.models` the stores use, so one store code
path builds either (`engine.records(client)` picks): a Qdrant server's client takes
qdrant-client's pydantic models, and Qdrant Edge (tools/edge/) takes these, and reads
qdrant-client's as well. Building qdrant-client's models costs about a second of CPU at import;
these are plain dataclasses, so a command on the embedded store starts without it. Each has
a docstring, if only to spare `dataclass` building one from its signature at import.
"""

from dataclasses import dataclass, field, fields, replace
from enum import Enum, StrEnum
from typing import Any


class Distance(StrEnum):
    COSINE = "Cosine"


class Modifier(StrEnum):
    IDF = "idf"


class PayloadSchemaType(StrEnum):
    KEYWORD = "keyword"


class UpdateStatus(StrEnum):
    COMPLETED = "completed"


class _Record:
    """What the stores call on a qdrant-client model, for these records too."""

    @classmethod
    def model_construct(cls, **values: Any) -> Any:
        return cls(**values)

    def model_copy(self, update: dict[str, Any] | None = None) -> Any:
        return replace(self, **(update or {}))  # type: ignore[type-var]

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        return {
            f.name: _dumped(getattr(self, f.name), mode)
            for f in fields(self)  # type: ignore[arg-type]
        }


def _dumped(value: Any, mode: str) -> Any:
    if isinstance(value, Enum) and mode == "json":
        return value.value
    if isinstance(value, _Record):
        return value.model_dump(mode)
    return value


# -- what the stores send ---------------------------------------------------------------------


@dataclass
class VectorParams(_Record):
    """A dense vector's size and distance."""

    size: int
    distance: Distance | str


@dataclass
class SparseVectorParams(_Record):
    """A sparse vector's modifier (IDF for BM25)."""

    modifier: Modifier | str | None = None


@dataclass
class SparseVector(_Record):
    """A sparse vector: its indices and their values."""

    indices: list[int]
    values: list[float]


@dataclass
class PointStruct(_Record):
    """A point to write: its id, vectors and payload."""

    id: int | str
    vector: Any
    payload: dict[str, Any] | None = None


@dataclass
class MatchValue(_Record):
    """A condition's one value."""

    value: Any


@dataclass
class MatchAny(_Record):
    """A condition's values, any of which matches."""

    any: list[Any]


@dataclass
class FieldCondition(_Record):
    """A payload field and what it must match."""

    key: str
    match: MatchValue | MatchAny | None = None


@dataclass
class Filter(_Record):
    """Conditions that must, must not or should hold."""

    must: list[Any] | Any | None = None
    must_not: list[Any] | Any | None = None
    should: list[Any] | Any | None = None
    min_should: Any = None


@dataclass
class QuantizationSearchParams(_Record):
    """How a search uses a collection's quantized vectors: whether the candidates they find
    are scored again on the original vectors, and how many more of them are fetched."""

    ignore: bool | None = None
    rescore: bool | None = None
    oversampling: float | None = None


@dataclass
class SearchParams(_Record):
    """How a nearest-vector search runs: exactly (every vector scored), or through its
    index and quantized vectors (`quantization`)."""

    hnsw_ef: int | None = None
    exact: bool = False
    quantization: QuantizationSearchParams | None = None


@dataclass
class QueryRequest(_Record):
    """One query of a batch: the query, the vector it uses, the limit and filter, and how
    the search runs (`params`)."""

    query: Any
    using: str | None = None
    limit: int | None = None
    filter: Filter | None = None
    with_payload: bool | list[str] | None = None
    with_vector: bool | list[str] | None = None
    params: SearchParams | None = None


# -- what the embedded store answers ----------------------------------------------------------


@dataclass
class CollectionDescription(_Record):
    """A collection's name, as listed."""

    name: str


@dataclass
class CollectionsResponse(_Record):
    """The collections listed."""

    collections: list[CollectionDescription]


@dataclass
class PayloadIndexInfo(_Record):
    """A payload index: its type and the points it holds."""

    data_type: str
    points: int = 0


@dataclass
class CollectionParams(_Record):
    """A collection's dense and sparse vector settings."""

    vectors: dict[str, VectorParams]
    sparse_vectors: dict[str, SparseVectorParams]


@dataclass
class CollectionConfig(_Record):
    """A collection's settings and its metadata."""

    params: CollectionParams
    metadata: dict[str, Any] | None = None


@dataclass
class CollectionInfo(_Record):
    """A collection's counts, payload indexes and settings."""

    points_count: int
    indexed_vectors_count: int
    segments_count: int
    payload_schema: dict[str, PayloadIndexInfo]
    config: CollectionConfig
    status: str = "green"


@dataclass
class CountResult(_Record):
    """How many points there are."""

    count: int


@dataclass
class UpdateResult(_Record):
    """A write's outcome."""

    status: UpdateStatus = UpdateStatus.COMPLETED
    operation_id: int | None = None


@dataclass
class Record(_Record):
    """A point as read back: its id, payload and vectors."""

    id: int | str
    payload: dict[str, Any] | None = None
    vector: Any = None


@dataclass
class ScoredPoint(_Record):
    """A point found by a query, with its score."""

    id: int | str
    version: int
    score: float
    payload: dict[str, Any] | None = None
    vector: Any = None


@dataclass
class QueryResponse(_Record):
    """The points a query found."""

    points: list[ScoredPoint] = field(default_factory=list)


@dataclass
class FacetValueHit(_Record):
    """A payload value and how many points hold it."""

    value: Any
    count: int


@dataclass
class FacetResponse(_Record):
    """A facet's values and their counts."""

    hits: list[FacetValueHit]
