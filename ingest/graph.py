"""The ingest graph: discover → load a batch → embed and store → … → prune → report.

Only one batch of files is held in the graph's state at a time, so memory stays bounded on
large corpora. A source's new chunks are stored before its old version is removed, so a
question asked during an update always finds one complete version of the document.
"""

from collections.abc import Callable
from operator import add
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from ingest.loaders import LoadError
from ingest.splitter import SplitterSettings
from ingest.sync import SourceFile, content_hash, discover, make_chunks
from tools.embedding import PrefixedEmbeddings
from tools.store import Chunk, KnowledgeStore

ProgressFn = Callable[[str, dict[str, Any]], None]
DIMENSION_PROBE = "dimension probe"


class PendingDoc(TypedDict):
    source: str
    doc_hash: str
    chunks: list[Chunk]
    status: str


class IngestInput(TypedDict, total=False):
    paths: list[str]
    """Files and folders to ingest."""
    prune: bool
    """Remove sources that are no longer among the discovered files."""
    description: str | None
    """What the store holds, in words; shown to the model in the tool's description."""


class IngestState(IngestInput, total=False):
    files: list[SourceFile]
    """Every discovered file (paths only; contents are read one batch at a time)."""
    known: dict[str, str]
    """The store's complete source versions before this run: source → content hash."""
    position: int
    """How many of `files` have been loaded so far."""
    pending: list[PendingDoc]
    """The current batch: documents loaded and split, waiting to be embedded."""
    stored: Annotated[list[dict[str, Any]], add]
    unchanged: Annotated[list[str], add]
    failed: Annotated[list[dict[str, str]], add]
    skipped: Annotated[list[dict[str, str]], add]
    removed: Annotated[list[str], add]


def build_ingest_graph(
    store: KnowledgeStore,
    embeddings: PrefixedEmbeddings,
    splitter: SplitterSettings | None = None,
    batch_files: int = 16,
    embed_batch: int = 64,
    on_progress: ProgressFn | None = None,
):
    """Build the graph that keeps `store` in sync with a set of files and folders."""
    splitter = splitter or SplitterSettings()
    notify = on_progress or (lambda event, data: None)

    def prepare(state: IngestState) -> dict[str, Any]:
        if store.exists():
            store.ensure(
                embeddings.fingerprint(store.fingerprint.get("dimension")), state.get("description")
            )
        else:
            dimension = len(embeddings.embed_query(DIMENSION_PROBE))
            store.ensure(
                {**embeddings.fingerprint(dimension), "splitter": splitter.as_dict()},
                state.get("description"),
            )
        files, failed, skipped = discover([Path(p) for p in state["paths"]])
        known = {s: info.doc_hash for s, info in store.sources().items() if info.complete}
        notify("discovered", {"files": len(files)})
        return {
            "files": files,
            "known": known,
            "position": 0,
            "pending": [],
            "failed": [f.to_dict() for f in failed],
            "skipped": [f.to_dict() for f in skipped],
        }

    def load_batch(state: IngestState) -> dict[str, Any]:
        start = state["position"]
        batch = state["files"][start : start + batch_files]
        pending, unchanged, failed = [], [], []
        for file in batch:
            try:
                doc_hash = content_hash(file.path, splitter)
                if state["known"].get(file.source) == doc_hash:
                    unchanged.append(file.source)
                    continue
                chunks = make_chunks(file, splitter)
            except LoadError as exc:
                failed.append({"source": file.source, "reason": str(exc)})
                continue
            except OSError as exc:
                failed.append({"source": file.source, "reason": exc.strerror or str(exc)})
                continue
            status = "updated" if file.source in state["known"] else "new"
            pending.append(
                PendingDoc(source=file.source, doc_hash=doc_hash, chunks=chunks, status=status)
            )
        notify("loaded", {"files": len(batch), "unchanged": len(unchanged)})
        return {
            "position": start + len(batch),
            "pending": pending,
            "unchanged": unchanged,
            "failed": failed,
        }

    def embed_and_store(state: IngestState) -> dict[str, Any]:
        stored = []
        for doc in state["pending"]:
            chunks = doc["chunks"]
            vectors: list[list[float]] = []
            for i in range(0, len(chunks), embed_batch):
                vectors.extend(
                    embeddings.embed_documents([c.text for c in chunks[i : i + embed_batch]])
                )
            store.upsert(
                chunks, vectors, [doc["doc_hash"]] * len(chunks), [len(chunks)] * len(chunks)
            )
            store.delete_stale(doc["source"], doc["doc_hash"])
            stored.append({"source": doc["source"], "status": doc["status"], "chunks": len(chunks)})
            notify("stored", {"source": doc["source"], "chunks": len(chunks)})
        return {"pending": [], "stored": stored}

    def prune(state: IngestState) -> dict[str, Any]:
        present = {f.source for f in state["files"]}
        removed = [s for s in store.sources() if s not in present]
        for source in removed:
            store.delete_source(source)
        return {"removed": removed}

    def after_load(state: IngestState) -> str:
        return "embed_and_store" if state["pending"] else after_store(state)

    def after_store(state: IngestState) -> str:
        if state["position"] < len(state["files"]):
            return "load_batch"
        return "prune" if state.get("prune") else END

    builder = StateGraph(IngestState, input_schema=IngestInput)
    builder.add_node(prepare)
    builder.add_node(load_batch)
    builder.add_node(embed_and_store)
    builder.add_node(prune)
    builder.add_edge(START, "prepare")
    builder.add_conditional_edges("prepare", after_store, ["load_batch", "prune", END])
    builder.add_conditional_edges(
        "load_batch", after_load, ["embed_and_store", "load_batch", "prune", END]
    )
    builder.add_conditional_edges("embed_and_store", after_store, ["load_batch", "prune", END])
    builder.add_edge("prune", END)
    return builder.compile(name="ingest")


def run_ingest(
    graph, paths: list[str], prune: bool = False, description: str | None = None
) -> dict[str, Any]:
    """Run the ingest graph to the end and return its report."""
    state = graph.invoke(
        {"paths": paths, "prune": prune, "description": description},
        {"recursion_limit": 1_000_000},
    )
    return {
        "files": len(state.get("files", [])),
        "stored": state.get("stored", []),
        "unchanged": state.get("unchanged", []),
        "failed": state.get("failed", []),
        "skipped": state.get("skipped", []),
        "removed": state.get("removed", []),
        "chunks_embedded": sum(s["chunks"] for s in state.get("stored", [])),
    }
