"""The retrieval tool: one `search_<store>` tool per store, returning numbered passages.

LangChain's tool classes are imported when a tool is built: `archivist search` runs the same
search without them (`search_once`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from archivist.agent.records import Passage
from archivist.tools.errors import ArchivistError
from archivist.tools.passage import place
from archivist.tools.search import DEFAULT as DEFAULT_SEARCH
from archivist.tools.search import SearchRequest
from archivist.tools.store import KnowledgeStore, tool_name
from archivist.tools.words import closest, number

if TYPE_CHECKING:
    from langchain_core.tools import BaseTool

    from archivist.agent.rerank import Reranker

NO_RESULTS = "No matching passages were found."
# Up to this many sources are named in the tool's description, so a model can filter by one.
LISTED_SOURCES = 12


QUERY_MAX = 1000
"""Characters a search's query may have (the tool's schema says so to the model)."""
SOURCE_MAX = 300
# Small models fill optional fields with "", "*" or "all" when they mean "no filter".
_NO_SOURCE = ("", "*", "all", "any", "none", "null")


def clean_query(value: str) -> str:
    """A search's query, stripped; ValueError if it holds no words."""
    value = value.strip()
    if not value:
        raise ValueError("query must contain words to search for")
    return value


def clean_source(value: str | None) -> str | None:
    """A search's source filter, stripped; None where a model wrote one meaning "none"."""
    if value is None or value.strip().lower() in _NO_SOURCE:
        return None
    return value.strip()


def checked_search(query: str, source: str | None) -> tuple[str, str | None]:
    """A person's search arguments checked as the tool's schema (`SearchArgs`) checks a
    model's, without building it: ValueError naming what is wrong."""
    if len(query) > QUERY_MAX:
        raise ValueError(f"the query has {len(query):,} characters, at most {QUERY_MAX:,} are read")
    if source is not None and len(source) > SOURCE_MAX:
        raise ValueError(f"the source filter has more than {SOURCE_MAX} characters")
    return clean_query(query), clean_source(source)


def format_results(
    name: str, query: str, results: Sequence[Passage], start: int = 1, source: str | None = None
) -> str:
    """Render results as a delimited block of numbered passages for the model.

    Passages are numbered from `start`, or by their own `n` when they carry one.

    Passage text and attributes are escaped, so a document cannot close the block or pose as
    the application's own markup: whatever it says reaches the model as quoted data.
    """
    from html import escape

    scope = f' source="{escape(source)}"' if source else ""
    lines = [f'<search_results tool="{escape(name)}" query="{escape(query)}"{scope}>']
    for n, result in enumerate(results, start=start):
        n = result.get("n", n)  # a number the turn already gave it (passages may be reordered)
        lines.append(
            f'<result n="{n}" source="{escape(result["source"])}" score="{result["score"]:.3f}">'
        )
        lines.append(escape(result["text"], quote=False))
        lines.append("</result>")
    if not results:
        lines.append(NO_RESULTS)
    lines.append("</search_results>")
    return "\n".join(lines)


def describe(store: KnowledgeStore) -> str:
    """Tell the model what a store holds: its description and, if few, its sources."""
    about = store.description or f"documents ingested into the '{store.name}' store"
    names = store.source_names()
    if not names:
        listing = " It is empty."
    elif len(names) <= LISTED_SOURCES:
        listing = f" Sources: {', '.join(names)}."
    else:
        listing = f" {number(len(names))} sources, e.g. {', '.join(examples(names))}."
    return (
        f"Search the knowledge base '{store.name}': {about}.{listing} Use it before answering "
        "any question about these documents. Returns numbered passages with their source; "
        "cite them as [n]."
    )


def examples(names: Sequence[str], n: int = 5) -> list[str]:
    """Pick `n` source names that show what a store holds: one from each of its largest
    folders in turn (their first name, leaving out `_` and `.` files, which are rarely
    content), rather than the alphabetically first, which all sit in one corner."""
    folders: dict[str, list[str]] = {}
    for name in names:
        folders.setdefault(name.rpartition("/")[0], []).append(name)
    for members in folders.values():
        members.sort(key=lambda name: (name.rpartition("/")[2][:1] in "_.", name))
    queues = sorted(folders.values(), key=lambda members: (-len(members), members[0]))
    picked: list[str] = []
    while len(picked) < n and any(queues):
        for members in queues:
            if members and len(picked) < n:
                picked.append(members.pop(0))
    return picked


def nearest_sources(typed: str, names: Sequence[str], n: int = 5) -> list[str]:
    """The sources, folders (`components/button/`) and files most like a `source` that matched
    nothing, likest first: as full names, file names and folder names."""
    # What a thing may be called, without its extension (".md" alike in every name would make
    # unlike names look close) → how it is written in a filter.
    called: dict[str, str] = {}
    for name in names:
        called.setdefault(_stem(name), name)
        folder, _, file = name.rpartition("/")
        called.setdefault(_stem(file), name)
        while folder:
            called.setdefault(folder, folder + "/")
            called.setdefault(folder.rpartition("/")[2], folder + "/")
            folder = folder.rpartition("/")[0]
    wanted = _stem(typed.strip().strip("/"))
    near = closest(wanted, called, n * 3, cutoff=0.75)
    return list(dict.fromkeys(called[c] for c in near))[:n]


def _stem(name: str) -> str:
    """A name without its extension (`guide/refund.md` → `guide/refund`)."""
    folder, slash, file = name.rpartition("/")
    return folder + slash + (file.rpartition(".")[0] or file)


def nearest_text(typed: str, names: Sequence[str]) -> str:
    """`The closest: a, b.` — or, when nothing is close, all the sources of a small store, a
    few from across a large one (`Sources include: …`), or that it is empty."""
    if not names:
        return "The store holds no sources yet."
    if near := nearest_sources(typed, names):
        return f"The closest: {', '.join(near)}."
    if len(names) <= LISTED_SOURCES:
        return f"Its sources: {', '.join(names)}."
    return f"Sources include: {', '.join(examples(names))}."


def ambiguity_note(source: str, places: Sequence[str]) -> str | None:
    """Say that a `source` filter named several folders or files (all searched), if it did."""
    if len(places) < 2:
        return None
    return (
        f"--source {source} names {number(len(places))} places: {', '.join(places)}; all are "
        "searched. Give more of the path to search one."
    )


class QueryEmbeddings(Protocol):
    """What a search needs of an embedding model: a query's vector."""

    def embed_query(self, text: str) -> list[float]: ...


class UnknownSource(ValueError):
    """A search's `source` names nothing in the store (the message lists what it could)."""


@dataclass(frozen=True, eq=True)
class SearchResult(Sequence[Passage]):
    """A search's passages, best first (it is a sequence of them), and what was done to
    them: the request they answer (its mode, k, source filter…) and the reranking."""

    query: str
    request: SearchRequest
    """The options the search ran with, its defaults resolved."""
    passages: list[Passage] = field(default_factory=list)
    reranked_by: str | None = None
    """The model that reordered the store's candidates (None: the store's own order)."""
    rerank_ms: float | None = None
    """With reranking: its wall time, in milliseconds."""

    def __getitem__(self, index):  # type: ignore[override] - a passage, or a list of them
        return self.passages[index]

    def __len__(self) -> int:
        return len(self.passages)

    def __iter__(self) -> Iterator[Passage]:
        return iter(self.passages)


def run_search(
    store: KnowledgeStore,
    embeddings: QueryEmbeddings,
    query: str,
    request: SearchRequest,
    reranker: Reranker | None = None,
) -> SearchResult:
    """Search a store for `query` with `request`'s options; return the passages and what
    was done to them.

    A `source` that names nothing in the store raises `UnknownSource` (before the query is
    embedded). When the request names a rerank model, `reranker` is that model's: the store
    returns `request.candidates` passages and the reranker's top `k` are the results.
    """
    if request.rerank and (reranker is None or reranker.model != request.rerank):
        built = f"reranks with {reranker.model}" if reranker else "has no reranker"
        raise ArchivistError(
            f"This search {built}: it cannot rerank with {request.rerank}.",
            f"Build it with that model: archivist.retriever(store, rerank='{request.rerank}').",
        )
    sources = None
    source = clean_source(request.source)
    if source:
        sources = store.match_sources(source)
        if not sources:
            names = store.source_names()
            retry = "with one of them, or without `source`" if names else "without `source`"
            raise UnknownSource(
                f"No source in '{store.name}' matches '{source}'. "
                f"{nearest_text(source, names)} Call {tool_name(store.name)} again {retry}."
            )
    vector = None if request.mode == "sparse" else embeddings.embed_query(query)
    found = store.search(vector, query, request, sources)
    passages: list[Passage] = [
        {**r, "score": round(r["score"], 4), **place(r["metadata"])} for r in found
    ]
    if not request.rerank or reranker is None:  # (a request to rerank has its reranker)
        return SearchResult(query, request, passages)
    started = time.perf_counter()
    ranked = reranker(query, passages, request.k)
    ms = round((time.perf_counter() - started) * 1000, 1)
    return SearchResult(query, request, ranked, reranker.model, ms)


def make_retrieval_tool(
    store: KnowledgeStore,
    embeddings: QueryEmbeddings,
    request: SearchRequest = DEFAULT_SEARCH,
    reranker: Reranker | None = None,
) -> BaseTool:
    """Build the `search_<store>` tool over a store: its text is the numbered passages, its
    artifact the `SearchResult` (`run_search` with `request`, `reranker` as it says).

    A call's config may change its options and number its passages
    (`archivist.agent.search_tool.search_config`). A `source` that names nothing in the store
    is an error the model can read and correct: the message lists sources it could use.
    """
    from archivist.agent.search_tool import search_tool

    def search(query: str, asked: SearchRequest) -> SearchResult:
        return run_search(store, embeddings, query, asked, reranker)

    return search_tool(tool_name(store.name), describe(store), search, request)


def search_once(
    store: KnowledgeStore,
    embeddings: QueryEmbeddings,
    query: str,
    request: SearchRequest = DEFAULT_SEARCH,
    reranker: Reranker | None = None,
) -> SearchResult:
    """Run a store's search outside any agent (`archivist search`), its query and source
    checked as the tool checks a model's; return its result.

    What a model would read as an error to correct becomes an ArchivistError for a person.
    """
    try:
        query, source = checked_search(query, request.source)
    except ValueError as exc:
        raise ArchivistError(f"Invalid search: {exc}.") from None
    try:
        return run_search(store, embeddings, query, replace(request, source=source), reranker)
    except UnknownSource as exc:
        raise ArchivistError(
            str(exc).split(" Call ", 1)[0],
            f"Use --source with one of them (archivist sources --store {store.name} lists "
            "all), or leave it out.",
        ) from None
