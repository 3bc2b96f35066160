"""What an ingest run does, decided once: nothing, or the ingest graph's run.

`IngestPlan.decide` looks at the store before anything heavy is imported: a run that would
change nothing gets its report from what the store recorded (`archivist.ingest.unchanged`,
no graph, no LangChain); any other run is the graph's. A run that fills a new store starts
embedding its first files while the graph's imports load (`IngestPlan.embed_ahead`,
`archivist.ingest.ahead`), and the graph's embedding step takes those vectors.

The graph's run is planned, then run: `plan_ingest` fits the request's chunks to the
embedding model's context and picks the store to write (the store itself, or a scratch
rebuild of it), and `IngestJob.run` runs the ingest graph; `IngestJob.finish` swaps a
finished rebuild in, and `IngestJob.report` says what the run did. The models and the stores
are handed in: nothing here reads settings or talks to Ollama itself.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from archivist.ingest.report import IngestOutcome, IngestReport
from archivist.ingest.request import IngestRequest
from archivist.ingest.unchanged import unchanged_report
from archivist.tools.progress import ProgressFn
from archivist.tools.store import SPARSE_SCHEME, KnowledgeStore, fingerprints_match

# The graph and LangChain's embeddings are imported by a run that has work to do.
if TYPE_CHECKING:
    from archivist.ingest.ahead import DocumentEmbedder, EmbedAhead
    from archivist.tools.embedding import PrefixedEmbeddings


@dataclass(frozen=True)
class EmbeddingModel:
    """The embedding model a run embeds with, as known before LangChain is imported."""

    name: str
    document_prefix: str
    query_prefix: str
    context: int
    """Tokens it reads per input, as Ollama runs it (chunk sizes are fitted to it)."""
    sender: DocumentEmbedder | None = None
    """The model's document embedder if it can be handed to another process (to embed a
    new store's first files ahead of the graph); None for embeddings of the caller's own."""

    def fingerprint(self) -> dict[str, str]:
        """The keys a store built with this model records."""
        return {
            "embed_model": self.name,
            "document_prefix": self.document_prefix,
            "query_prefix": self.query_prefix,
        }


@dataclass(frozen=True)
class IngestPlan:
    """What one ingest run does: nothing (`unchanged`, its report), or the graph's run."""

    request: IngestRequest
    model: EmbeddingModel
    unchanged: IngestReport | None
    """The report of a run that would change nothing; None when the graph runs."""
    new_store: bool
    """Whether the run fills a store that does not exist yet."""

    @classmethod
    def decide(
        cls,
        request: IngestRequest,
        store: KnowledgeStore,
        model: EmbeddingModel,
        on_progress: ProgressFn | None = None,
    ) -> IngestPlan:
        """Decide what `request` does to `store`, from what the store recorded and the files'
        sizes and times (none is read)."""
        exists = store.exists()
        unchanged = (
            unchanged_report(request, store, model.context, model.fingerprint(), on_progress)
            if exists
            else None
        )
        return cls(request, model, unchanged, not exists)

    def embed_ahead(self) -> EmbedAhead | None:
        """Start sending the first files of a new store to the embedding model while the
        graph's imports load; None when there is nothing to start (`EmbedAhead.start`)."""
        if self.unchanged is not None or not self.new_store or self.model.sender is None:
            return None
        from archivist.ingest.ahead import EmbedAhead

        return EmbedAhead.start(
            self.model.sender, self.request, self.model.document_prefix, self.model.context
        )

    def job(self, target: KnowledgeStore, embeddings: PrefixedEmbeddings) -> IngestJob:
        """The graph's run into `target` (`plan_ingest`)."""
        return plan_ingest(self.request, target, embeddings, self.model.context)


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

    def run(
        self, on_progress: ProgressFn | None = None, ahead: EmbedAhead | None = None
    ) -> IngestOutcome:
        """Run the ingest graph over the request's paths, taking the vectors `ahead` sent for
        its first files; return what it did."""
        from archivist.ingest.graph import build_ingest_graph, run_ingest

        embeddings = self.embeddings
        if ahead is not None:
            from archivist.ingest.ahead import AheadEmbeddings

            embeddings = embeddings.with_inner(AheadEmbeddings(embeddings.inner, ahead))
        graph = build_ingest_graph(self.writing, embeddings, on_progress, ahead=ahead)
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
