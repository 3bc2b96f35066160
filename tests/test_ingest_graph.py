import pytest
from conftest import SHOP, write_files

from agent import models
from ingest.graph import build_ingest_graph, run_ingest
from tools.errors import StoreMismatch
from tools.store import KnowledgeStore

DOCS = {
    "guide/refunds.md": "---\ntitle: Refunds\n---\n# Refunds\n\nRefunds are paid within 30 days.",
    "guide/shipping.md": "# Shipping\n\nStandard shipping takes 3 to 5 business days.",
    "notes.txt": "Plain text notes about the warranty: two years on all products.",
    "image.png": b"\x89PNG\r\n\x1a\n\0\0",
}


def ingest(archivist, paths, store="docs", prune=False):
    graph = build_ingest_graph(
        KnowledgeStore(archivist.client, store), archivist.embeddings, batch_files=2
    )
    return run_ingest(graph, [str(p) for p in paths], prune=prune)


def test_the_graph_is_compiled_under_its_name(archivist):
    graph = build_ingest_graph(KnowledgeStore(archivist.client, "docs"), archivist.embeddings)
    assert graph.name == "ingest"
    assert {"prepare", "load_batch", "embed_and_store", "prune"} <= set(graph.get_graph().nodes)


def test_files_are_stored_with_relative_sources_and_metadata(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    report = ingest(archivist, [root])
    assert sorted(s["source"] for s in report["stored"]) == [
        "guide/refunds.md",
        "guide/shipping.md",
        "notes.txt",
    ]
    assert report["skipped"] == [
        {"source": "image.png", "reason": "binary file of unsupported type '.png'"}
    ]
    assert report["failed"] == []
    store = KnowledgeStore(archivist.client, "docs")
    results = store.search(archivist.embeddings.embed_query("refunds paid"), "refunds paid", k=1)
    top = results[0]
    assert top.source == "guide/refunds.md"
    assert top.metadata["title"] == "Refunds"
    assert top.metadata["headings"] == ["Refunds"]
    extracted = "# Refunds\n\nRefunds are paid within 30 days."
    assert extracted[top.metadata["start"] : top.metadata["end"]] == top.text


def test_a_file_given_directly_is_named_by_its_file_name(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    report = ingest(archivist, [root / "guide" / "shipping.md"])
    assert [s["source"] for s in report["stored"]] == ["shipping.md"]


def test_documents_and_queries_get_nomic_task_prefixes_on_the_wire(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha text."})
    ingest(archivist, [root])
    inputs = [text for body in ollama.requests_to("/api/embed") for text in body["input"]]
    assert "search_document: # A\n\nAlpha text." in inputs
    ollama.clear_requests()
    archivist.search("alpha", "docs")
    assert ollama.requests_to("/api/embed")[0]["input"] == ["search_query: alpha"]


def test_a_rerun_embeds_nothing_and_keeps_the_point_count(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    count = KnowledgeStore(archivist.client, "docs").count()
    ollama.clear_requests()
    report = ingest(archivist, [root])
    assert ollama.requests_to("/api/embed") == []
    assert len(report["unchanged"]) == 3 and report["stored"] == []
    assert KnowledgeStore(archivist.client, "docs").count() == count


def test_only_a_changed_file_is_re_embedded_and_its_old_chunks_go(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    (root / "notes.txt").write_text("The warranty now lasts three years.", encoding="utf-8")
    ollama.clear_requests()
    report = ingest(archivist, [root])
    embedded = [t for body in ollama.requests_to("/api/embed") for t in body["input"]]
    assert embedded == ["search_document: The warranty now lasts three years."]
    assert report["stored"] == [{"source": "notes.txt", "status": "updated", "chunks": 1}]
    store = KnowledgeStore(archivist.client, "docs")
    texts = [p.payload["text"] for p in store.client.scroll("docs", limit=100)[0]]
    assert "The warranty now lasts three years." in texts
    assert not any("two years" in t for t in texts)


def test_prune_removes_sources_that_no_longer_exist(archivist, tmp_path):
    root = write_files(tmp_path / "kb", DOCS)
    ingest(archivist, [root])
    (root / "notes.txt").unlink()
    report = ingest(archivist, [root])
    assert report["removed"] == []
    report = ingest(archivist, [root], prune=True)
    assert report["removed"] == ["notes.txt"]
    assert "notes.txt" not in KnowledgeStore(archivist.client, "docs").sources()


def test_the_store_is_created_with_the_models_real_dimension(archivist, ollama):
    ingest(archivist, [SHOP], store="shop")
    fingerprint = KnowledgeStore(archivist.client, "shop").fingerprint
    assert fingerprint["dimension"] == 768
    assert fingerprint["embed_model"] == "nomic-embed-text"
    assert fingerprint["document_prefix"] == "search_document: "


def test_querying_with_another_embedding_model_is_refused(archivist, settings, tmp_path):
    ingest(archivist, [write_files(tmp_path / "kb", DOCS)])
    from agent.service import Archivist

    other = Archivist(settings.with_overrides(embed_model="all-minilm"))
    other.__dict__["client"] = archivist.client
    with pytest.raises(StoreMismatch) as refused:
        other.search("refunds", "docs")
    assert "nomic-embed-text" in str(refused.value) and "all-minilm" in str(refused.value)
    assert models.embeddings(settings, "all-minilm").document_prefix == ""
