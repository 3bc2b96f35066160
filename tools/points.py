"""Qdrant's records as the embedded store passes them: points, filters, queries, results.

They have the names and fields of the `qdrant_client.models` the stores use, so one store code
path builds either (`engine.records(client)` picks): a Qdrant server's client takes
qdrant-client's pydantic models, and Qdrant Edge (tools/edge.py) takes these, and reads
qdrant-client's as well. Building qdrant-client's models costs about a second of CPU at import;
these are plain dataclasses, so a command on the embedded store starts without it.
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
    size: int
    distance: Distance | str


@dataclass
class SparseVectorParams(_Record):
    modifier: Modifier | str | None = None


@dataclass
class SparseVector(_Record):
    indices: list[int]
    values: list[float]


@dataclass
class PointStruct(_Record):
    id: int | str
    vector: Any
    payload: dict[str, Any] | None = None


@dataclass
class MatchValue(_Record):
    value: Any


@dataclass
class MatchAny(_Record):
    any: list[Any]


@dataclass
class FieldCondition(_Record):
    key: str
    match: MatchValue | MatchAny | None = None


@dataclass
class Filter(_Record):
    must: list[Any] | Any | None = None
    must_not: list[Any] | Any | None = None
    should: list[Any] | Any | None = None
    min_should: Any = None


@dataclass
class QueryRequest(_Record):
    query: Any
    using: str | None = None
    limit: int | None = None
    filter: Filter | None = None
    with_payload: bool | list[str] | None = None
    with_vector: bool | list[str] | None = None


# -- what the embedded store answers ----------------------------------------------------------


@dataclass
class CollectionDescription(_Record):
    name: str


@dataclass
class CollectionsResponse(_Record):
    collections: list[CollectionDescription]


@dataclass
class PayloadIndexInfo(_Record):
    data_type: str
    points: int = 0


@dataclass
class CollectionParams(_Record):
    vectors: dict[str, VectorParams]
    sparse_vectors: dict[str, SparseVectorParams]


@dataclass
class CollectionConfig(_Record):
    params: CollectionParams
    metadata: dict[str, Any] | None = None


@dataclass
class CollectionInfo(_Record):
    points_count: int
    indexed_vectors_count: int
    segments_count: int
    payload_schema: dict[str, PayloadIndexInfo]
    config: CollectionConfig
    status: str = "green"


@dataclass
class CountResult(_Record):
    count: int


@dataclass
class UpdateResult(_Record):
    status: UpdateStatus = UpdateStatus.COMPLETED
    operation_id: int | None = None


@dataclass
class Record(_Record):
    id: int | str
    payload: dict[str, Any] | None = None
    vector: Any = None


@dataclass
class ScoredPoint(_Record):
    id: int | str
    version: int
    score: float
    payload: dict[str, Any] | None = None
    vector: Any = None


@dataclass
class QueryResponse(_Record):
    points: list[ScoredPoint] = field(default_factory=list)


@dataclass
class FacetValueHit(_Record):
    value: Any
    count: int


@dataclass
class FacetResponse(_Record):
    hits: list[FacetValueHit]
