"""Qdrant Edge (Qdrant's in-process engine) behind the `Engine` seam the stores code against.

`EdgeClient` (client.py) has `QdrantClient`'s method names and takes its turns at the store
with the other processes sharing it; `indexing.py` says when and where a shard is indexed or
compacted (in a child process, beside an ingest); `files.py` keeps a collection's own files
(its settings, its seal, the store's generation); `convert.py` translates records to Edge's
and back.
"""

from archivist.tools.edge.client import EdgeClient

__all__ = ["EdgeClient"]
