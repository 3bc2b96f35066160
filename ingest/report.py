"""What an ingest run did: the graph's outcome, and the report a command prints.

Plain records, apart from the graph's module: an ingest with nothing to do is reported
without building the graph (`archivist.ingest.unchanged`)."""

from dataclasses import dataclass
from typing import Any

from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import Shard


@dataclass(frozen=True)
class IngestOutcome:
    """What one run of the graph did, source by source."""

    files: int
    """Files discovered."""
    stored: list[dict[str, Any]]
    """Sources stored: `source`, `status` ("new" or "updated"), `chunks`."""
    unchanged: list[str]
    failed: list[dict[str, str]]
    """Files or documents that could not be read or embedded: `source`, `reason`."""
    skipped: list[dict[str, str]]
    """Files that are not documents: `source`, `reason`."""
    removed: list[str]
    renamed: dict[str, str]
    """Stored sources given new names (old → new): a root added beside a single one gives
    the first its label, `label/path` (nothing is embedded again)."""

    @property
    def chunks_embedded(self) -> int:
        """Chunks embedded and stored by this run."""
        return sum(s["chunks"] for s in self.stored)


@dataclass(frozen=True)
class IngestReport(IngestOutcome):
    """What an ingest run did, as `ingest --json` prints it (`to_dict`): the graph's outcome,
    with the store, the run's settings and its time."""

    store: str
    shard: Shard | None
    reindexed: bool
    """Whether the store was rebuilt for another embedding model or sparse scheme."""
    points: int
    """Chunks in the store when the run ended."""
    splitter: SplitterSettings
    """The chunk sizes used (fitted to the embedding model)."""
    seconds: float
    """The run's time, start to end (the store's closing included when the run closed it)."""

    def to_dict(self) -> dict[str, Any]:
        """The report as `ingest --json` prints it."""
        return {
            "store": self.store,
            "files": self.files,
            "stored": self.stored,
            "unchanged": self.unchanged,
            "failed": self.failed,
            "skipped": self.skipped,
            "removed": self.removed,
            "renamed": self.renamed,
            "chunks_embedded": self.chunks_embedded,
            "shard": None if self.shard is None else str(self.shard),
            "reindexed": self.reindexed,
            "points": self.points,
            "splitter": {
                "chunk_size": self.splitter.chunk_size,
                "chunk_overlap": self.splitter.chunk_overlap,
            },
            "seconds": self.seconds,
        }
