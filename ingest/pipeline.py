"""The decisions around an ingest run: chunk sizes that fit the embedding model,
rebuild-and-swap, and the report.

A run is planned, then run: `plan_ingest` fits the request's chunks to the embedding model's
context and picks the store to write (the store itself, or a scratch rebuild of it), and
`IngestJob.run` runs the ingest graph; `IngestJob.finish` swaps a finished rebuild in, and
`IngestJob.report` says what the run did. The models and the stores are handed in: nothing
here reads settings.
"""

from dataclasses import dataclass, fields, replace

from archivist.ingest.graph import build_ingest_graph, run_ingest
from archivist.ingest.report import IngestOutcome, IngestReport
from archivist.ingest.request import IngestRequest
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.progress import ProgressFn
from archivist.tools.store import SPARSE_SCHEME, KnowledgeStore, fingerprints_match


@dataclass
class IngestJob:
    """One planned ingest run: where it writes, with which chunk sizes."""

    target: KnowledgeStore
    """The store asked for."""
    writing: KnowledgeStore
    """The store written: the target, or the scratch store a rebuild of it is written to."""
    embeddings: PrefixedEmbeddings
    request: IngestRequest
    """The run as asked, its chunk sizes fitted to the embedding model."""

    @property
    def rebuilding(self) -> bool:
        """Whether this run rebuilds the target for another embedding model or sparse scheme."""
        return self.writing is not self.target

    @property
    def kept(self) -> str:
        """What a run that stops midway leaves, and how to go on."""
        if self.rebuilding:
            return (
                f"Store '{self.target.name}' is untouched; run the same command again to "
                "resume the rebuild."
            )
        return "Chunks stored so far are kept; run the same command again to finish."

    def run(self, on_progress: ProgressFn | None = None) -> IngestOutcome:
        """Run the ingest graph over the request's paths; return what it did."""
        graph = build_ingest_graph(self.writing, self.embeddings, on_progress)
        with self.writing.indexing_aside():
            return run_ingest(graph, self.request)

    def finish(self) -> int:
        """Swap a finished rebuild in; return how many chunks the store holds."""
        if self.rebuilding:
            self.target.replace_with(self.writing)
        return self.target.count()

    def report(self, outcome: IngestOutcome, points: int, seconds: float) -> IngestReport:
        """The run's report: what the graph did, and where, in `seconds`."""
        return IngestReport(
            **{f.name: getattr(outcome, f.name) for f in fields(outcome)},
            store=self.target.name,
            shard=self.request.shard,
            reindexed=self.rebuilding,
            points=points,
            splitter=self.request.splitter,
            seconds=round(seconds, 2),
        )


def plan_ingest(
    request: IngestRequest,
    target: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    context: int,
) -> IngestJob:
    """Fit the request's chunks to the embedding model's `context` (tokens) and choose the
    store to write: the target, or, with `reindex` and a target built with another embedding
    model or an older sparse scheme, a scratch store swapped in when the rebuild is done (the
    target stays usable until then, and an interrupted rebuild resumes on the next `reindex`
    run)."""
    request = request.fitted(context, embeddings.model)
    exists = target.exists()
    wanted = embeddings.fingerprint(target.fingerprint.get("dimension") if exists else None)
    writing = target
    if (
        request.reindex
        and exists
        and not fingerprints_match(target.fingerprint, {**wanted, "sparse": SPARSE_SCHEME})
    ):
        writing = target.rebuild_store()
        if request.description is None:
            request = replace(request, description=target.description)
        if writing.exists() and (
            writing.fingerprint.get("embed_model") != wanted["embed_model"]
            or writing.sparse_scheme != SPARSE_SCHEME
        ):
            writing.drop()  # a rebuild for another model or sparse scheme was left behind
    return IngestJob(target, writing, embeddings, request)
