"""Archivist: local-first agentic RAG — a LangGraph agent answering from Qdrant stores.

The installed package is `archivist`; its layers live in folders at the top of the repository:

* `archivist.tools` (tools/) — storage: the knowledge store, its engines, sparse vectors,
  migration. Imports nothing else of Archivist's.
* `archivist.ingest` (ingest/) — the write path: discover, load, split, sync, embed, the
  ingest graph. Uses storage.
* `archivist.agent` (agent/) — the query engine: the typed records, the agent graphs and
  their steps, the agent's setup and one turn, the retrieval tool, context fitting, grading,
  citations, prompts. Uses storage.
* `archivist` (archivist/) — the application shell on top: settings, the Ollama seam, the
  `Archivist` facade, the CLI, the chat and its conversation, the LangGraph server, doctor,
  the turn log; and `archivist.evaluation`, the tool-calling evaluations.
"""

__all__ = ["Archivist", "IngestRequest", "Settings", "load_settings", "__version__"]


def __getattr__(name: str):
    # The facade pulls in LangChain and Qdrant; `import archivist` alone stays cheap, and the
    # version (read from the installed metadata, ~0.03 s) is read when asked for.
    if name == "__version__":
        from archivist.version import __version__

        return __version__
    if name == "Archivist":
        from archivist.app import Archivist

        return Archivist
    if name == "IngestRequest":
        from archivist.ingest.request import IngestRequest

        return IngestRequest
    if name in ("Settings", "load_settings"):
        from archivist import settings

        return getattr(settings, name)
    raise AttributeError(f"module 'archivist' has no attribute {name!r}")
