"""Records translated to Qdrant Edge's and back: vectors, payloads, filters, a collection's
settings and the answers the stores read (the fields of `qdrant_client.models`, as
archivist.tools.points holds them; qdrant-client's own are read too)."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson
import qdrant_edge as qe

from archivist.tools import points as records

if TYPE_CHECKING:
    from qdrant_client import models

# The stores make keyword payload indexes, nothing else; mapped from disk (Memory.Cold) in
# every segment closed to writes, rather than read whole into memory at every opening (most
# of what Edge's load still cost at 100,000 chunks on disk: 0.10 s and 29 MB, against 0.04 s
# and none held; linear in the store). Filters on them read the pages they need.
SCHEMAS = {records.PayloadSchemaType.KEYWORD.value: qe.KeywordIndexParams(memory=qe.Memory.Cold)}


def completed() -> records.UpdateResult:
    return records.UpdateResult(status=records.UpdateStatus.COMPLETED)


def enum_value(value: Any) -> Any:
    """An enum's value (qdrant-client's or ours), or the value itself."""
    return getattr(value, "value", value)


def modifier(value: str | None) -> records.Modifier | None:
    return None if value is None else records.Modifier(value)


def vector_params(params: Any) -> dict[str, Any]:
    """A dense vector's settings as the collection file keeps them."""
    if not isinstance(params, records.VectorParams):  # qdrant-client's (a store moved over)
        return params.model_dump(mode="json")
    return {"size": params.size, "distance": enum_value(params.distance)}


def sparse_params(params: Any) -> dict[str, Any]:
    if not isinstance(params, records.SparseVectorParams):
        return params.model_dump(mode="json")
    return {"modifier": enum_value(params.modifier)}


def is_sparse(vector: Any) -> bool:
    """Whether `vector` is a sparse vector record (ours or qdrant-client's)."""
    return hasattr(vector, "indices") and hasattr(vector, "values")


def jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str)) if value is not None else None


def point_id(value: Any) -> int | str:
    return value if isinstance(value, int) else str(value)


def id_out(value: Any) -> int | str:
    # qdrant-client gives UUID ids as strings; Edge gives uuid.UUID objects.
    return value if isinstance(value, int) else str(value)


class ScrolledRecord(records.Record):
    """A point as a scroll gives it back (`records.Record`), its id read from Edge's record
    when first asked: a listing reads every point's payload and never its id, which Edge's
    binding makes a `uuid.UUID` and `id_out` a `str` (~1.5 µs a point, 24,000 points 0.04 s).
    """

    def __init__(self, point: qe.Record, payload: dict[str, Any] | None, vector: Any = None):
        self._point = point
        self.payload = payload
        self.vector = vector

    @functools.cached_property
    def id(self) -> int | str:  # type: ignore[override]
        return id_out(self._point.id)

    def model_copy(self, update: dict[str, Any] | None = None) -> records.Record:
        values = {"id": self.id, "payload": self.payload, "vector": self.vector}
        return records.Record(**{**values, **(update or {})})


def _sparse(vector: models.SparseVector) -> qe.SparseVector:
    return qe.SparseVector(list(vector.indices), list(vector.values))


def vector_to_edge(vector: Any) -> Any:
    if is_sparse(vector):
        return _sparse(vector)
    return vector if isinstance(vector, list) else [float(x) for x in vector]


def vectors_to_edge(vector: Any) -> Any:
    if isinstance(vector, Mapping):
        return {name: vector_to_edge(v) for name, v in vector.items()}
    return vector_to_edge(vector)


def vectors_from_edge(vector: Any) -> Any:
    if vector is None:
        return None
    if isinstance(vector, Mapping):
        return {name: vectors_from_edge(v) for name, v in vector.items()}
    if isinstance(vector, qe.SparseVector):
        return records.SparseVector(indices=list(vector.indices), values=list(vector.values))
    return list(vector)


# Fields kept as their JSON text in an Edge shard, and given back as what they were. Edge
# converts each payload value by trying one type after another, which costs ~10 µs for a
# string and ~90 µs for a chunk's metadata (a dict of lists): two thirds of a chunk's payload,
# and the largest part of an ingest's own CPU. Nothing filters on them. Stores written before
# hold them as they are, read as they are.
PACKED_FIELDS = ("metadata",)


def payload_in(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """A point's payload as Edge stores it: PACKED_FIELDS as JSON text (in a copy: the
    caller's payload is left as it was)."""
    packed = payload
    for key in PACKED_FIELDS:
        value = payload.get(key) if payload else None
        if isinstance(value, dict):
            if packed is payload:
                packed = dict(payload)
            packed[key] = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    return packed


def payload_out(payload: dict[str, Any] | None) -> dict[str, Any] | None:
    """A payload as Edge gives it back, PACKED_FIELDS read from their JSON text."""
    if not payload:
        return payload
    for key in PACKED_FIELDS:
        text = payload.get(key)
        if isinstance(text, str):
            payload[key] = orjson.loads(text)
    return payload


def selection(value: bool | Sequence[str]) -> bool | list[str]:
    """All (True), none (False) or the named payload fields or vectors."""
    return value if isinstance(value, bool) else list(value)


def edge_filter(value: models.Filter | None) -> qe.Filter | None:
    """Translate the filters the stores make: field conditions that must (not) match."""
    if value is None:
        return None
    if value.should is not None or value.min_should is not None:
        raise NotImplementedError("EdgeClient translates must and must_not filters only.")
    return qe.Filter(must=_conditions(value.must), must_not=_conditions(value.must_not))


def _conditions(value: Any) -> list[Any] | None:
    if value is None:
        return None
    return [_condition(c) for c in (value if isinstance(value, list) else [value])]


def _condition(condition: Any) -> Any:
    # qdrant-client's records or ours: the same class names and fields.
    if type(condition).__name__ == "FieldCondition" and condition.match is not None:
        return qe.FieldCondition(key=condition.key, match=_match(condition.match))
    raise NotImplementedError(f"EdgeClient does not translate {condition!r}.")


def _match(match: Any) -> Any:
    kind = type(match).__name__
    if kind == "MatchValue":
        return qe.MatchValue(match.value)
    if kind == "MatchAny":
        return qe.MatchAny(list(match.any))
    raise NotImplementedError(f"EdgeClient does not translate {kind}.")


def collection_info(config: dict[str, Any], info: Any) -> records.CollectionInfo:
    """A collection's description, from its collection file's settings and its shard's
    counts (Edge's `ShardInfo`, or the counts its seal keeps)."""
    return records.CollectionInfo(
        indexed_vectors_count=info.indexed_vectors_count,
        points_count=info.points_count,
        segments_count=info.segments_count,
        payload_schema={
            key: records.PayloadIndexInfo(data_type=schema, points=0)
            for key, schema in config["payload_schema"].items()
        },
        config=records.CollectionConfig(
            params=records.CollectionParams(
                vectors={
                    name: records.VectorParams(
                        size=params["size"], distance=records.Distance(params["distance"])
                    )
                    for name, params in config["vectors"].items()
                },
                sparse_vectors={
                    name: records.SparseVectorParams(modifier=modifier(params.get("modifier")))
                    for name, params in config["sparse_vectors"].items()
                },
            ),
            metadata=config["metadata"],
        ),
    )


def edge_query(request: models.QueryRequest, oversampling: float = 1.0) -> qe.QueryRequest:
    """A nearest-vector query as Edge takes it (the only kind the stores send), drawing
    `oversampling` times the quantized candidates it asks for."""
    query = request.query
    if not (isinstance(query, list) or is_sparse(query)):
        raise NotImplementedError("EdgeClient runs nearest-vector queries only.")
    return qe.QueryRequest(
        limit=request.limit or 10,
        query=qe.Query.Nearest(vector_to_edge(query), using=request.using),
        filter=edge_filter(request.filter),
        with_payload=selection(request.with_payload or False),
        with_vector=selection(request.with_vector or False),
        params=search_params(request.params, oversampling),
    )


def search_params(params: Any, oversampling: float = 1.0) -> qe.SearchParams | None:
    """A search's parameters as Edge takes them (None: Edge's defaults), with `oversampling`
    times the quantized candidates asked for."""
    if params is None:
        return None
    quantization = params.quantization
    return qe.SearchParams(
        hnsw_ef=params.hnsw_ef,
        exact=bool(params.exact),
        quantization=None
        if quantization is None
        else qe.QuantizationSearchParams(
            ignore=bool(quantization.ignore),
            rescore=quantization.rescore,
            oversampling=None
            if quantization.oversampling is None
            else quantization.oversampling * oversampling,
        ),
    )


def query_response(scored: Sequence[Any]) -> records.QueryResponse:
    """Edge's scored points as a query's answer."""
    return records.QueryResponse(
        points=[
            records.ScoredPoint(
                id=id_out(p.id),
                version=p.version,
                score=p.score,
                payload=payload_out(p.payload),
                vector=vectors_from_edge(p.vector),
            )
            for p in scored
        ]
    )
