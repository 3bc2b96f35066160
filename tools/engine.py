"""The seam between the stores and Qdrant: the engine methods `KnowledgeStore` calls.

Two engines satisfy it: qdrant-client's `QdrantClient` (a Qdrant server or cluster) and
`EdgeClient` (Qdrant Edge, in this process). Only the methods and arguments the stores and
the store copies really pass are listed, so an engine implements exactly these.

The records crossing the seam have the names and fields of `qdrant_client.models`: a server's
client takes qdrant-client's, the embedded engine Archivist's light ones (`records`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from qdrant_client import models
    from qdrant_client.http.models import QueryResponse


@runtime_checkable
class Engine(Protocol):
    """What a store needs of a Qdrant: collections, points, queries and facets.

    Arguments before `*` are passed by position, the others by name, as the stores do.
    """

    def collection_exists(self, collection_name: str) -> bool: ...

    def get_collections(self) -> models.CollectionsResponse: ...

    def get_collection(self, collection_name: str) -> models.CollectionInfo: ...

    def create_collection(
        self,
        collection_name: str,
        *,
        vectors_config: Mapping[str, models.VectorParams] | None = None,
        sparse_vectors_config: Mapping[str, models.SparseVectorParams] | None = None,
        shard_number: int | None = None,
        replication_factor: int | None = None,
        write_consistency_factor: int | None = None,
        on_disk_payload: bool | None = None,
        hnsw_config: models.HnswConfigDiff | None = None,
        quantization_config: models.ScalarQuantization | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> bool:
        """Make a collection; the cluster layout and what it keeps on disk are a server's
        (`ServerLayout`): the embedded store lays out its stores itself and refuses them."""
        ...

    def update_collection(
        self, collection_name: str, *, metadata: dict[str, Any] | None = None
    ) -> bool: ...

    def create_payload_index(
        self,
        collection_name: str,
        field_name: str,
        field_schema: models.PayloadSchemaType,
        *,
        wait: bool = True,
    ) -> models.UpdateResult: ...

    def delete_collection(self, collection_name: str) -> bool: ...

    def count(
        self, collection_name: str, *, count_filter: models.Filter | None = None, exact: bool = True
    ) -> models.CountResult: ...

    def upsert(
        self, collection_name: str, *, points: Sequence[models.PointStruct], wait: bool = True
    ) -> models.UpdateResult: ...

    def delete(
        self, collection_name: str, *, points_selector: models.Filter, wait: bool = True
    ) -> models.UpdateResult: ...

    def scroll(
        self,
        collection_name: str,
        *,
        scroll_filter: models.Filter | None = None,
        limit: int = 10,
        offset: models.ExtendedPointId | None = None,
        with_payload: bool | Sequence[str] = True,
        with_vectors: bool | Sequence[str] = False,
    ) -> tuple[list[models.Record], models.ExtendedPointId | None]: ...

    def query_batch_points(
        self, collection_name: str, *, requests: Sequence[models.QueryRequest]
    ) -> list[QueryResponse]: ...

    def facet(
        self, collection_name: str, *, key: str, limit: int = 10, exact: bool = False
    ) -> models.FacetResponse: ...

    def close(self) -> None: ...


@runtime_checkable
class TurnTakingEngine(Engine, Protocol):
    """An engine that processes take turns at (the embedded one, see docs/concurrency.md).

    `EdgeClient` declares it; a server serves many processes itself and does not. Callers
    ask `turn_taking(engine)` once rather than probing for each method.
    """

    path: Path
    """The folder the embedded store keeps its files in."""

    def hold(self) -> AbstractContextManager[None]:
        """Keep the store through a block: no other process writes in between."""
        ...

    def writing(self) -> AbstractContextManager[None]:
        """Be the store's one writer through a block."""
        ...

    def indexing_aside(self) -> AbstractContextManager[None]:
        """Through a block, build indexes without stopping this process's other threads."""
        ...

    def compact_aside(self, collection_name: str) -> bool:
        """Inside `indexing_aside`, compact what a collection holds now without stopping this
        process's other threads, if its close would; return whether it started."""
        ...

    @property
    def generation(self) -> Any:
        """A value that changes whenever the stored points may have."""
        ...

    def remembered(self, collection_name: str, key: str, compute: Callable[[], Any]) -> Any:
        """`compute()`, a JSON value derived from what a collection holds, kept with it until
        it is next written, so that later processes read it back instead of computing it."""
        ...

    @property
    def settings_generation(self) -> Any:
        """A value that changes whenever a collection's settings or metadata may have."""
        ...

    def searching(self, collection_name: str) -> None:
        """A search of the collection follows: start reading what it will read (a hint)."""
        ...


def turn_taking(engine: Engine) -> TurnTakingEngine | None:
    """Return `engine` if processes take turns at it (the embedded store), else None."""
    return engine if isinstance(engine, TurnTakingEngine) else None


def records(engine: Engine) -> ModuleType:
    """The module of request records (`PointStruct`, `Filter`, `QueryRequest`, …) `engine`
    takes: archivist.tools.points for the embedded store, qdrant-client's models (imported
    only then: they cost about a second to build) for a server's client."""
    if turn_taking(engine) is not None:
        from archivist.tools import points

        return points
    from qdrant_client import models

    return models


def held(engine: Engine) -> AbstractContextManager[Any]:
    """Keep the embedded store through a block (no other process writes in between); a
    server: a block like any other."""
    taking = turn_taking(engine)
    return taking.hold() if taking is not None else nullcontext()


def writing(engine: Engine) -> AbstractContextManager[Any]:
    """Be the embedded store's one writer through a block; a server takes many writers."""
    taking = turn_taking(engine)
    return taking.writing() if taking is not None else nullcontext()


def exit_follows() -> AbstractContextManager[Any]:
    """Through a block, stores closed are closed for a process that ends right after them:
    the embedded store leaves the shards it only read to the exit, their pages cached for the
    next command (`tools.edge.client.exit_follows`). Nothing to do when no embedded store was
    opened (its module never imported) or for a server."""
    edge = sys.modules.get("archivist.tools.edge.client")
    return edge.exit_follows() if edge is not None else nullcontext()


def indexing_aside(engine: Engine) -> AbstractContextManager[Any]:
    """Through a block, the embedded store builds indexes without stopping this process's
    other threads; a server indexes on its own anyway."""
    taking = turn_taking(engine)
    return taking.indexing_aside() if taking is not None else nullcontext()


def scroll_pages(
    engine: Engine,
    collection: str,
    limit: int,
    selector: models.Filter | None = None,
    with_payload: bool | Sequence[str] = True,
    with_vectors: bool = False,
) -> Iterator[list[models.Record]]:
    """Yield a collection's points (those `selector` picks) a page of `limit` at a time."""
    offset = None
    while True:
        points, offset = engine.scroll(
            collection,
            scroll_filter=selector,
            limit=limit,
            offset=offset,
            with_payload=with_payload if isinstance(with_payload, bool) else list(with_payload),
            with_vectors=with_vectors,
        )
        if points:
            yield points
        if offset is None:
            return
