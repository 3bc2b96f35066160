"""The ingest request: what one run was asked to do, checked once where it is built.

The command line, the server, the chat's sample and notebooks build an `IngestRequest`
(`IngestRequest.build`); the facade, the plan and the graph pass it on as it is. The plan
gives the graph a copy with chunk sizes fitted to the embedding model (`fitted`).

The options that shape a root's documents are recorded with the root in the store
(`recorded_options`), and read back to read it again the same way (`from_recorded`, for
`archivist sync` and the sources' status). Each field says in its metadata whether it is
recorded and how (`recorded(...)`): an option recorded under its own name, as `build` takes
it, needs nothing more than `metadata=recorded()`.
"""

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from archivist.ingest.embedder import EmbedSettings
from archivist.ingest.loaders import LoaderOptions, LoadError
from archivist.ingest.roots import KINDS, Root
from archivist.ingest.splitter import SplitterSettings
from archivist.ingest.sync import FolderRules, Shard
from archivist.ingest.urls import WebOptions, available, check_url, is_url
from archivist.tools.errors import ArchivistError, install_command

RECORDED = "recorded"
"""The field metadata key holding how a request field is recorded (a `Recorded`)."""


@dataclass(frozen=True)
class Recorded:
    """How a request field is kept among the options a store records with each root, and
    read back into `IngestRequest.build`'s arguments when the root is read again."""

    write: Callable[[Any], dict[str, Any]] | None = None
    """The field's value → its recorded options, JSON values (None: the value under the
    field's name)."""
    read: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    """A root's recorded options → `build` arguments (None: the field's name, where recorded:
    a store recorded before the option existed gets `build`'s default)."""
    kinds: tuple[str, ...] = KINDS
    """The kinds of root it is read back for (a crawl's bounds mean nothing to a folder);
    none: recorded for what reads the store (the sources' status), never read back."""


def recorded(
    write: Callable[[Any], dict[str, Any]] | None = None,
    read: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None,
    kinds: tuple[str, ...] = KINDS,
) -> dict[str, Recorded]:
    """Field metadata recording a request field with each root (see `Recorded`)."""
    return {RECORDED: Recorded(write, read, kinds)}


def _write_loader(loader: LoaderOptions) -> dict[str, Any]:
    return {
        "text_extensions": sorted(loader.text_extensions),
        "loaders": [f"{pattern}={spec}" for pattern, spec in loader.extra_loaders],
        "text_field": loader.text_field,
        "id_field": loader.id_field,
    }


def _read_loader(options: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "text_extensions": options.get("text_extensions") or (),
        "loaders": options.get("loaders") or (),
        "text_field": options.get("text_field"),
        "id_field": options.get("id_field"),
    }


def _write_rules(rules: FolderRules) -> dict[str, Any]:
    return {"include": list(rules.include), "exclude": list(rules.exclude)}


def _read_rules(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"include": options.get("include") or (), "exclude": options.get("exclude") or ()}


def _write_web(web: WebOptions) -> dict[str, Any]:
    return {"max_pages": web.max_pages, "max_depth": web.max_depth}


def _read_web(options: Mapping[str, Any]) -> dict[str, Any]:
    return {"max_pages": options.get("max_pages"), "max_depth": options.get("max_depth")}


_FILES = ("folder", "file")


@dataclass(frozen=True)
class IngestRequest:
    """One ingest run, as asked and checked."""

    paths: tuple[str, ...] = ()
    """Files, folders and URLs to ingest."""
    store: str = ""
    """The store asked for (a rebuild writes a scratch store first, then swaps it in)."""
    prune: bool = False
    prune_blank: bool = False
    """Prune even a root that now lists no file, and a site whose starting page (or every
    page stored) answers 404: asked for by name (`--prune`); a sync's own pruning keeps
    them, since an unmounted drive or a site down looks the same."""
    """Remove sources that are no longer among the discovered files."""
    description: str | None = None
    """What the store holds, in words; shown to the model in the tool's description."""
    reindex: bool = False
    """Rebuild a store made with another embedding model or sparse scheme."""
    shard: Shard | None = None
    """Only this part of the sources: N runs of parts 1…N together do what one run does."""
    splitter: SplitterSettings = field(
        default_factory=SplitterSettings,
        metadata=recorded(write=lambda s: {"splitter": s.as_dict()}, kinds=()),
    )
    """How documents are split; recorded as fitted to the embedding model, which the
    sources' status compares with (`build` makes it again from the chunk sizes)."""
    chunk_size: int | None = field(default=None, metadata=recorded())
    """The chunk size asked for (None: the default, which shrinks to fit the model)."""
    chunk_overlap: int | None = field(default=None, metadata=recorded())
    """The chunk overlap asked for (None: the default)."""
    embed: EmbedSettings = field(default_factory=EmbedSettings)
    loader: LoaderOptions = field(
        default_factory=LoaderOptions,
        metadata=recorded(write=_write_loader, read=_read_loader, kinds=_FILES),
    )
    """How files are read (`--text-field`, `--id-field`, `--text-ext`, `--loader`)."""
    folder_rules: FolderRules = field(
        default_factory=FolderRules,
        metadata=recorded(write=_write_rules, read=_read_rules, kinds=_FILES),
    )
    """Which files inside the folders are read (`--include`/`--exclude`)."""
    allow_chat_embedder: bool = False
    """Embed with a model Ollama does not list as an embedding model."""
    web: WebOptions = field(
        default_factory=WebOptions,
        metadata=recorded(write=_write_web, read=_read_web, kinds=("url",)),
    )
    """How the URLs among `paths` are crawled (`--max-pages`, `--max-depth`)."""
    load_timeout: float | None = None
    """Seconds one file's load may take before the file fails and the run goes on (0: no
    limit; None: the settings', which the facade fills in, else `loading.DEFAULT_SECONDS`)."""

    @property
    def urls(self) -> tuple[str, ...]:
        """The web pages and sites among `paths`."""
        return tuple(p for p in self.paths if is_url(p))

    @property
    def local_paths(self) -> tuple[str, ...]:
        """The files and folders among `paths`."""
        return tuple(p for p in self.paths if not is_url(p))

    @classmethod
    def build(
        cls,
        paths: Sequence[str],
        store: str,
        *,
        prune: bool = False,
        prune_blank: bool | None = None,
        description: str | None = None,
        reindex: bool = False,
        chunk_size: int | None = None,
        chunk_overlap: int | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        text_field: str | None = None,
        id_field: str | None = None,
        embed: EmbedSettings | None = None,
        shard: "str | Shard | None" = None,
        text_extensions: Sequence[str] = (),
        loaders: Sequence[str] = (),
        include: Sequence[str] = (),
        exclude: Sequence[str] = (),
        allow_chat_embedder: bool = False,
        max_pages: int | None = None,
        max_depth: int | None = None,
        load_timeout: float | None = None,
    ) -> "IngestRequest":
        """Check an ingest run's options and gather them; refuse combinations that cannot work.

        `shard` is `i/N`; `text_extensions` are read as plain text (`.py`); `loaders` name
        LangChain document loaders for file patterns (`*.xml=module:Class`);
        `include`/`exclude` are globs on paths inside the folders (gitignore syntax);
        `max_pages` and `max_depth` bound the crawl of each URL among `paths`;
        `load_timeout` is the seconds one file's load may take (0: no limit).
        """
        paths = tuple(check_url(p) if is_url(p) else str(p) for p in paths)
        if any(is_url(p) for p in paths) and not available():
            raise ArchivistError(
                "Reading web pages needs the web extra (trafilatura extracts a page's "
                "main content).",
                f"Install it: {install_command('web')}",
            )
        for name, value in (("--max-pages", max_pages), ("--max-depth", max_depth)):
            if value is not None and value < (1 if name == "--max-pages" else 0):
                raise ArchivistError(
                    f"{name} {value} is too small.", f"Give {name} as a whole number ≥ 1."
                )
        web_options = WebOptions(
            max_pages=max_pages or WebOptions.max_pages,
            max_depth=WebOptions.max_depth if max_depth is None else max_depth,
        )
        missing = [p for p in paths if not is_url(p) and not os.path.lexists(p)]
        if missing and len(missing) == len(paths):
            raise ArchivistError(
                f"Nothing to ingest: {', '.join(missing)} does not exist.",
                "Check the path (relative paths start from the current folder); the store was "
                "not created.",
            )
        special = [p for p in paths if "://" not in p and _special(p)]
        if special and len(special) == len(paths):
            raise ArchivistError(
                f"Nothing to ingest: {'; '.join(f'{p} is {_special(p)}' for p in special)}.",
                "Give files or folders; the store was not created.",
            )
        if load_timeout is not None and not load_timeout >= 0:
            raise ArchivistError(
                f"A load timeout of {load_timeout} s is not a time.",
                "Give the seconds one file's load may take, or 0 for no limit.",
            )
        if isinstance(shard, str):
            shard = Shard.parse(shard)
        if shard is not None and reindex:
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
        return cls(
            paths=paths,
            store=store,
            prune=prune,
            prune_blank=prune if prune_blank is None else prune_blank,
            description=description,
            reindex=reindex,
            shard=shard,
            splitter=splitter,
            chunk_size=chunk_size,
            chunk_overlap=chunk_overlap,
            embed=replace(embed or EmbedSettings(), **{k: v for k, v in sizes.items() if v}),
            loader=LoaderOptions(
                text_field or None,
                id_field or LoaderOptions.id_field,
                text_extensions=_extensions(text_extensions),
                extra_loaders=_named_loaders(loaders),
            ),
            folder_rules=FolderRules(include=tuple(include), exclude=tuple(exclude)),
            allow_chat_embedder=allow_chat_embedder,
            web=web_options,
            load_timeout=load_timeout,
        )

    def recorded_options(self) -> dict[str, Any]:
        """The options that shape a root's documents, as the store records them with each
        root this run reads (JSON values)."""
        options: dict[str, Any] = {}
        for item in fields(self):
            how = item.metadata.get(RECORDED)
            if how is not None:
                value = getattr(self, item.name)
                options.update(how.write(value) if how.write else {item.name: value})
        return options

    @classmethod
    def recorded_arguments(cls, kind: str, options: Mapping[str, Any]) -> dict[str, Any]:
        """The `build` arguments that read a root of `kind` with recorded `options` again
        as it was read."""
        arguments: dict[str, Any] = {}
        for item in fields(cls):
            how = item.metadata.get(RECORDED)
            if how is None or kind not in how.kinds:
                continue
            if how.read is not None:
                arguments.update(how.read(options))
            elif item.name in options:
                arguments[item.name] = options[item.name]
        return arguments

    @classmethod
    def from_recorded(
        cls, root: Root, store: str, *, prune: bool = False, **run: Any
    ) -> "IngestRequest":
        """The run that reads a recorded root of `store` again with the options recorded
        with it (checked as `build` checks them); `run` holds options of this run alone,
        never recorded (`prune_blank`)."""
        arguments = cls.recorded_arguments(root.kind, root.options)
        return cls.build([root.location], store, prune=prune, **arguments, **run)

    def fitted(self, context: int, model: str) -> "IngestRequest":
        """This request with chunk sizes that fit an embedding model reading `context` tokens:
        default sizes shrink to fit, sizes asked for that cannot fit are refused rather than
        silently truncated."""
        latin, cjk = self.splitter.limits(context)
        if self.chunk_size is not None and (
            self.splitter.chunk_size > latin or self.splitter.cjk_chunk_size > cjk
        ):
            raise ArchivistError(
                f"--chunk-size {self.chunk_size} is too large for {model}: it "
                f"reads {context} tokens per chunk, which fits chunks of at most {latin} "
                "characters (code blocks and tables may double a chunk).",
                f"Use --chunk-size {latin} or less, or raise the model's num_ctx in Ollama.",
            )
        return replace(self, splitter=self.splitter.fitted(context))


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
        from archivist.ingest.loaders.community import loader_class_for

        try:
            loader_class_for(spec.strip())
        except LoadError as exc:
            raise ArchivistError(f"Cannot use --loader {value}: {exc}.") from None
        named.append((pattern.strip(), spec.strip()))
    return tuple(named)


def _special(path: str) -> str:
    """What a path that exists is, when it is neither a file nor a folder ('' otherwise)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return ""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return ""
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device, not a file"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO), not a file"
    return "not a regular file"
