"""Copy stores between Qdrants (embedded to server, server to embedded, home to home), and
move the stores an earlier release kept in qdrant-client's local mode into Qdrant Edge.

Points are copied with their vectors and payloads, so nothing is embedded again, through the
operations every engine offers (scroll with vectors, upsert), with the store's metadata
(fingerprint, description, creation time) as it was.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from archivist.tools.edge import EdgeClient
from archivist.tools.edge.files import MIGRATING_FILE
from archivist.tools.engine import Engine, scroll_pages
from archivist.tools.errors import ArchivistError, StoreLocked
from archivist.tools.store import (
    COPYING,
    KnowledgeStore,
    ServerLayout,
    copy_points,
    list_stores,
)

if TYPE_CHECKING:  # opening a store may read this module: events only where a copy runs
    from archivist.tools.progress import ProgressFn


def stores_to_copy(source: Engine, names: Sequence[str] = ()) -> list[str]:
    """The stores a copy takes from `source`: the named ones (default: all), each checked to
    exist there — a missing one is refused with how to create it, before any target is
    opened or touched."""
    names = list(dict.fromkeys(names)) or list_stores(source)
    for name in names:
        KnowledgeStore(source, name).info()
    return names


def copy_stores(
    source: Engine,
    target: Engine,
    names: Sequence[str] = (),
    layout: ServerLayout | None = None,
    batch: int = 256,
    force: bool = False,
    on_progress: ProgressFn | None = None,
) -> list[dict[str, Any]]:
    """Copy the named stores (default: all) from one Qdrant to another; report each one.

    Every target is checked before anything is copied, so a refusal leaves both sides as
    they were. Progress: "copied" events with the store, the chunks copied and the total.
    """
    names = stores_to_copy(source, names)
    pairs = [(KnowledgeStore(source, n), KnowledgeStore(target, n, layout)) for n in names]
    for _, copy in pairs:
        if not force and _holds_a_whole_store(copy):
            raise ArchivistError(
                f"The target already has a store '{copy.name}' with {copy.count()} chunks.",
                "Add --force to replace it, or copy into another Qdrant.",
            )
    copied = []
    for origin, copy in pairs:
        started = time.perf_counter()
        chunks = copy_store(origin, copy, batch, force, on_progress)
        seconds = round(time.perf_counter() - started, 2)
        copied.append({"store": origin.name, "chunks": chunks, "seconds": seconds})
    return copied


def copy_store(
    source: KnowledgeStore,
    target: KnowledgeStore,
    batch: int = 256,
    force: bool = False,
    on_progress: ProgressFn | None = None,
) -> int:
    """Copy every point of `source` into `target`; return how many were copied.

    A target that exists and holds points is refused unless `force`, which replaces it (a
    copy cut short is replaced without). Until the target's points are counted whole at the
    end, it is marked as a copy in progress, which searches and ingests refuse.
    """
    info = source.info()
    total = source.count()
    if target.exists():
        if not force and _holds_a_whole_store(target):
            raise ArchivistError(
                f"The target already has a store '{target.name}' with {target.count()} chunks.",
                "Add --force to replace it, or copy into another Qdrant.",
            )
        target.drop()
    target.ensure(info["fingerprint"], info.get("description", ""))
    copying = {**info, COPYING: f"store '{source.name}'"}
    target.client.update_collection(target.name, metadata={"archivist": copying})
    # Each batch's event said of this store, out of its whole count (no callback: no event).
    relabelled = (
        None
        if on_progress is None
        else lambda event: on_progress(replace(event, store=source.name, total=total))
    )
    copied = copy_points(source, target, batch, relabelled)
    stored = target.count()
    if stored != total:
        raise ArchivistError(
            f"Store '{target.name}' holds {stored} chunks after the copy, but the source holds "
            f"{total}.",
            "Run the same command again with --force to copy it anew.",
        )
    target.client.update_collection(target.name, metadata={"archivist": info})
    return copied


def _holds_a_whole_store(store: KnowledgeStore) -> bool:
    """Whether `store` exists with chunks and is not a copy that was cut short."""
    return store.exists() and store.count() > 0 and not store.info().get(COPYING)


def migrate_legacy(legacy: Path, target: EdgeClient) -> list[str]:
    """Move the stores an earlier release kept in qdrant-client's local mode into `target`.

    Runs once: the old folder is renamed to `<name>.migrated` afterwards (kept as a backup),
    so a store deleted later does not come back. Returns the names copied.
    """
    if not (legacy / "meta.json").is_file():
        return []
    try:
        copied = migrate_local(legacy, target)
    except RuntimeError as exc:
        if "already accessed" in str(exc):
            raise StoreLocked(
                f"The embedded store at {legacy} is in use by another Archivist process.",
                "Wait for it to finish; this release then moves its stores to Qdrant Edge.",
            ) from None
        raise
    backup = legacy.with_name(legacy.name + ".migrated")
    shutil.rmtree(backup, ignore_errors=True)
    legacy.rename(backup)
    if copied:
        sys.stderr.write(
            f"Moved {len(copied)} store(s) ({', '.join(copied)}) from {legacy} to the Qdrant "
            f"Edge engine at {target.path}; the old folder is kept as {backup}: delete it "
            "once you no longer need it.\n"
        )
    return copied


def migrate_local(source: Path, target: EdgeClient, batch: int = 512) -> list[str]:
    """Copy the collections of a qdrant-client local-mode folder into `target`.

    Points keep their ids, vectors and payloads (nothing is re-embedded) and collections their
    metadata. Collections `target` already holds are left alone, except one whose copy was
    interrupted, which is copied again: a marker beside the collection is made before it is
    created and removed only once it holds every point. Returns the names copied.
    """
    from qdrant_client import QdrantClient, models

    legacy = QdrantClient(path=str(source))
    copied = []
    try:
        for description in legacy.get_collections().collections:
            name = description.name
            marker = target.path / f"{name}.{MIGRATING_FILE}"
            if target.collection_exists(name):
                if not marker.exists():
                    continue
                target.delete_collection(name)
            marker.touch()
            info = legacy.get_collection(name)
            target.create_collection(
                name,
                vectors_config=info.config.params.vectors,
                sparse_vectors_config=info.config.params.sparse_vectors,
                metadata=info.config.metadata,
            )
            target.create_payload_index(name, "source", models.PayloadSchemaType.KEYWORD)
            for records in scroll_pages(legacy, name, batch, with_vectors=True):
                points = [
                    models.PointStruct(id=r.id, vector=r.vector or {}, payload=r.payload)
                    for r in records
                ]
                target.upsert(name, points=points)
            held, total = target.count(name).count, legacy.count(name, exact=True).count
            if held != total:
                raise ArchivistError(
                    f"Moving store '{name}' to Qdrant Edge copied {held} of its {total} chunks.",
                    "Run the command again: the move is done again from the old folder, "
                    f"{source}, which is kept until every store is moved.",
                )
            marker.unlink()
            copied.append(name)
    finally:
        legacy.close()
    return copied
