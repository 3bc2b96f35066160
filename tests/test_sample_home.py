"""The prepared sample home that `shop_store` copies equals a fresh ingest of the sample."""

import json

from conftest import SHOP, SHOP_DESCRIPTION

from archivist.app import Archivist
from archivist.tools.store import KnowledgeStore


def contents(app: Archivist, store: str) -> tuple[dict, dict]:
    """Every point's payload and vector, and the store's metadata, without the clock times."""
    client = app._client
    points, offset = {}, None
    while True:
        batch, offset = client.scroll(
            store, limit=100, offset=offset, with_payload=True, with_vectors=True
        )
        for point in batch:
            # A version is [source, content hash, chunks, the time it was ingested].
            version = json.loads(point.payload["version"])[:-1]
            payload = {**point.payload, "version": version, "ingested_at": None}
            points[str(point.id)] = (payload, point.vector)
        if offset is None:
            break
    info = KnowledgeStore(client, store).info()
    # The roots it records, without the time each was added.
    roots = [{k: v for k, v in r.items() if k != "added_at"} for r in info.get("roots", [])]
    return points, {**{k: v for k, v in info.items() if k != "created_at"}, "roots": roots}


def test_the_copied_sample_store_equals_a_fresh_ingest(archivist, shop_store, settings, tmp_path):
    fresh = Archivist(settings.with_overrides(home=tmp_path / "fresh"))
    try:
        fresh.ingest([str(SHOP)], "shop_docs", description=SHOP_DESCRIPTION)
        expected = contents(fresh, "shop_docs")
    finally:
        fresh.close()
    copied = contents(archivist, shop_store)

    assert len(copied[0]) > 10
    assert copied == expected
    assert archivist.stores()[0]["description"] == SHOP_DESCRIPTION
