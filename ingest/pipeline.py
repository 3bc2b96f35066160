"""The decisions around an ingest run: options, chunk sizes that fit the embedding model,
rebuild-and-swap, and the report.

A run is planned, then run: `ingest_options` checks what was asked, `plan_ingest` fits the
chunks to the embedding model's context and picks the store to write (the store itself, or a
scratch rebuild of it), and `IngestJob.run` runs the ingest graph, swaps a finished rebuild
in and reports. The models and the stores are handed in: nothing here reads settings.
"""

import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from archivist.ingest.embedder import EmbedSettings
from archivist.ingest.graph import build_ingest_graph, run_ingest
from archivist.ingest.loaders import LoaderOptions, LoadError
from archivist.ingest.loaders.community import loader_class_for
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import FolderRules, Shard
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import ProgressFn
from archivist.tools.store import SPARSE_SCHEME, KnowledgeStore, fingerprints_match


@dataclass(frozen=True)
class IngestOptions:
    """How an ingest run was asked to go, checked."""

    prune: bool = False
    description: str | None = None
    reindex: bool = False
    shard: str | None = None
    splitter: SplitterSettings = field(default_factory=SplitterSettings)
    chunk_size: int | None = None
    """The chunk size asked for (None: the default, which shrinks to fit the model)."""
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    loader: LoaderOptions = field(default_factory=LoaderOptions)
    folder_rules: FolderRules = field(default_factory=FolderRules)
    """Which files inside the folders are read (`--include`/`--exclude`)."""


def ingest_options(
    *,
    prune: bool = False,
    description: str | None = None,
    reindex: bool = False,
    chunk_size: int | None = None,
    chunk_overlap: int | None = None,
    batch_size: int | None = None,
    concurrency: int | None = None,
    text_field: str | None = None,
    id_field: str | None = None,
    embed: EmbedSettings | None = None,
    shard: str | None = None,
    text_extensions: Sequence[str] = (),
    loaders: Sequence[str] = (),
    include: Sequence[str] = (),
    exclude: Sequence[str] = (),
) -> IngestOptions:
    """Check an ingest run's options and gather them; refuse combinations that cannot work.

    `text_extensions` are read as plain text (`.py`); `loaders` name LangChain document
    loaders for file patterns (`*.xml=module:Class`); `include`/`exclude` are globs on paths
    inside the folders (gitignore syntax).
    """
    if shard is not None:
        shard = str(Shard.parse(shard))
        if reindex:
            raise ArchivistError(
                "--reindex cannot be combined with --shard: a rebuild swaps the whole store "
                "in at once, which one shard cannot do.",
                "Rebuild on one machine without --shard, or ingest into a new store with "
                "--shard on every machine.",
            )
    try:
        splitter = SplitterSettings().resized(chunk_size, chunk_overlap)
    except ValueError as exc:
        raise ArchivistError(f"Cannot split with {exc}.", "Choose other sizes.") from None
    sizes = {"batch_size": batch_size, "concurrency": concurrency}
    return IngestOptions(
        prune=prune,
        description=description,
        reindex=reindex,
        shard=shard,
        splitter=splitter,
        chunk_size=chunk_size,
        embed=replace(embed or EmbedSettings(), **{k: v for k, v in sizes.items() if v}),
        loader=LoaderOptions(
            text_field or None,
            id_field or LoaderOptions.id_field,
            text_extensions=_extensions(text_extensions),
            extra_loaders=_named_loaders(loaders),
        ),
        folder_rules=FolderRules(include=tuple(include), exclude=tuple(exclude)),
    )


def _extensions(values: Sequence[str]) -> frozenset[str]:
    """Normalise `--text-ext` values (`py`, `.PY`, `.py,.toml`) to lower-case `.ext`."""
    found = set()
    for value in values:
        for part in value.split(","):
            part = part.strip().lower()
            if part:
                found.add(part if part.startswith(".") else f".{part}")
    return frozenset(found)


def _named_loaders(values: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """Read `--loader PATTERN=module:Class` values, checking each class imports now rather
    than failing every file it names."""
    named = []
    for value in values:
        pattern, _, spec = value.partition("=")
        if not pattern.strip() or ":" not in spec:
            raise ArchivistError(
                f"'{value}' does not name a loader.",
                "Write --loader 'PATTERN=module:Class', e.g. "
                "--loader '*.xml=langchain_community.document_loaders:UnstructuredXMLLoader'.",
            )
        try:
            loader_class_for(spec.strip())
        except LoadError as exc:
            raise ArchivistError(f"Cannot use --loader {value}: {exc}.") from None
        named.append((pattern.strip(), spec.strip()))
    return tuple(named)


def fit_splitter(options: IngestOptions, context: int, model: str) -> SplitterSettings:
    """Chunk sizes that fit an embedding model reading `context` tokens: default sizes shrink
    to fit, sizes asked for that cannot fit are refused rather than silently truncated."""
    splitter = options.splitter
    latin, cjk = splitter.limits(context)
    if options.chunk_size is not None and (
        splitter.chunk_size > latin or splitter.cjk_chunk_size > cjk
    ):
        raise ArchivistError(
            f"--chunk-size {options.chunk_size} is too large for {model}: it "
            f"reads {context} tokens per chunk, which fits chunks of at most {latin} "
            "characters (code blocks and tables may double a chunk).",
            f"Use --chunk-size {latin} or less, or raise the model's num_ctx in Ollama.",
        )
    return splitter.fitted(context)


@dataclass
class IngestJob:
    """One planned ingest run: where it writes, with which chunk sizes."""

    target: KnowledgeStore
    """The store asked for."""
    writing: KnowledgeStore
    """The store written: the target, or the scratch store a rebuild of it is written to."""
    embeddings: PrefixedEmbeddings
    options: IngestOptions
    splitter: SplitterSettings
    started: float = field(default_factory=time.perf_counter)

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

    def run(self, paths: list[str], on_progress: ProgressFn | None = None) -> dict[str, Any]:
        """Run the ingest graph over `paths`; return its report."""
        graph = build_ingest_graph(
            self.writing,
            self.embeddings,
            self.splitter,
            embed=self.options.embed,
            loader_options=self.options.loader,
            on_progress=on_progress,
            folder_rules=self.options.folder_rules,
        )
        with self.writing.indexing_aside():
            return run_ingest(
                graph,
                list(paths),
                prune=self.options.prune,
                description=self.options.description,
                shard=self.options.shard,
            )

    def finish(self, report: dict[str, Any]) -> dict[str, Any]:
        """Swap a finished rebuild in; return the ingest report."""
        if self.rebuilding:
            self.target.replace_with(self.writing)
        return {
            "store": self.target.name,
            **report,
            "shard": self.options.shard,
            "reindexed": self.rebuilding,
            "points": self.target.count(),
            "splitter": {
                "chunk_size": self.splitter.chunk_size,
                "chunk_overlap": self.splitter.chunk_overlap,
            },
            "seconds": round(time.perf_counter() - self.started, 2),
        }


def plan_ingest(
    target: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    options: IngestOptions,
    context: int,
) -> IngestJob:
    """Fit the chunks to the embedding model's `context` (tokens) and choose the store to
    write: the target, or, with `reindex` and a target built with another embedding model or
    an older sparse scheme, a scratch store swapped in when the rebuild is done (the target
    stays usable until then, and an interrupted rebuild resumes on the next `reindex` run)."""
    started = time.perf_counter()
    splitter = fit_splitter(options, context, embeddings.model)
    exists = target.exists()
    wanted = embeddings.fingerprint(target.fingerprint.get("dimension") if exists else None)
    writing = target
    if (
        options.reindex
        and exists
        and not fingerprints_match(target.fingerprint, {**wanted, "sparse": SPARSE_SCHEME})
    ):
        writing = target.rebuild_store()
        if options.description is None:
            options = replace(options, description=target.description)
        if writing.exists() and (
            writing.fingerprint.get("embed_model") != wanted["embed_model"]
            or writing.sparse_scheme != SPARSE_SCHEME
        ):
            writing.drop()  # a rebuild for another model or sparse scheme was left behind
    return IngestJob(target, writing, embeddings, options, splitter, started)
