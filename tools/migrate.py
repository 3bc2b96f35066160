"""Copy stores between Qdrants (embedded to server, server to embedded, home to home).

Points are copied with their vectors and payloads, so nothing is embedded again, through the
operations every engine offers (scroll with vectors, upsert), with the store's metadata
(fingerprint, description, creation time) as it was.
"""

import time
from collections.abc import Callable, Sequence
from typing import Any

from qdrant_client import QdrantClient

from archivist.tools.errors import ArchivistError
from archivist.tools.store import KnowledgeStore, ServerLayout, copy_points, list_stores

ProgressFn = Callable[[int, int], None]


def copy_stores(
    source: QdrantClient,
    target: QdrantClient,
    names: Sequence[str] = (),
    layout: ServerLayout | None = None,
    batch: int = 256,
    force: bool = False,
    on_progress: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """Copy the named stores (default: all) from one Qdrant to another; report each one.

    Every target is checked before anything is copied, so a refusal leaves both sides as
    they were.
    """
    names = list(dict.fromkeys(names)) or list_stores(source)
    pairs = [(KnowledgeStore(source, n), KnowledgeStore(target, n, layout)) for n in names]
    for origin, copy in pairs:
        origin.info()  # a missing store is refused here, with how to create it
        if not force and copy.exists() and copy.count():
            raise ArchivistError(
                f"The target already has a store '{copy.name}' with {copy.count()} chunks.",
                "Add --force to replace it, or copy into another Qdrant.",
            )
    copied = []
    for origin, copy in pairs:
        started = time.perf_counter()
        progress = on_progress and (lambda done, total, n=origin.name: on_progress(n, done, total))
        chunks = copy_store(origin, copy, batch, force, progress)
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

    A target that exists and holds points is refused unless `force`, which replaces it. The
    copy is checked by counting the target's points at the end.
    """
    info = source.info()
    total = source.count()
    if target.exists():
        held = target.count()
        if held and not force:
            raise ArchivistError(
                f"The target already has a store '{target.name}' with {held} chunks.",
                "Add --force to replace it, or copy into another Qdrant.",
            )
        target.drop()
    target.ensure(info["fingerprint"], info.get("description", ""))
    target.client.update_collection(target.name, metadata={"archivist": info})
    copied = copy_points(
        source, target, batch, (lambda copied: on_progress(copied, total)) if on_progress else None
    )
    stored = target.count()
    if stored != total:
        raise ArchivistError(
            f"Store '{target.name}' holds {stored} chunks after the copy, but the source holds "
            f"{total}.",
            "Run the same command again with --force to copy it anew.",
        )
    return copied
