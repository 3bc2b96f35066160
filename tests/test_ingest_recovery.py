"""Embedding failures, interrupted runs, rebuilds for a new model, and chunk sizes that fit."""

import pytest
from conftest import write_files

from archivist.app import Archivist
from archivist.ingest.embedder import EmbedSettings
from archivist.ingest.request import IngestRequest
from archivist.ingest.splitter import SplitterSettings
from archivist.tools.errors import ArchivistError
from archivist.tools.migrate import copy_stores
from archivist.tools.progress import Retried
from archivist.tools.store import KnowledgeStore, connect, list_stores

FAST = EmbedSettings(batch_size=2, concurrency=1, attempts=3, backoff=0.01, max_backoff=0.02)
LONG = "\n\n".join(f"Section {i}. " + "Tents and boots and lamps. " * 12 for i in range(5))
CORPUS = {
    "a.md": "# A\n\nAlpha is the first file.",
    "b.md": LONG,
    "c.md": "# C\n\nGamma is the last file.",
}


def point_ids(archivist, store):
    ids, offset = set(), None
    while True:
        batch, offset = archivist._client.scroll(store, limit=256, offset=offset)
        ids |= {str(p.id) for p in batch}
        if offset is None:
            return ids


def test_server_errors_are_retried_with_backoff(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nAlpha."})
    events = []
    ollama.fail("/api/embed", 503, "server busy, please try again", times=2)
    report = archivist.ingest([str(root)], "docs", on_progress=events.append, embed=FAST)
    assert report.stored == [{"source": "a.md", "status": "new", "chunks": 1}]
    retries = [e for e in events if isinstance(e, Retried)]
    assert [(r.attempt, r.error) for r in retries] == [
        (1, "server busy, please try again (status code: 503)"),
        (2, "server busy, please try again (status code: 503)"),
    ]
    assert retries[1].wait > retries[0].wait  # exponential backoff
    assert len(ollama.requests_to("/api/embed")) == 4  # 2 failures, the probe, the chunk


def test_retries_give_up_with_a_message_that_says_how_to_finish(archivist, ollama, tmp_path):
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(root / "a.md")], "docs", embed=FAST)
    ollama.fail("/api/embed", 500, "llama runner process has terminated", times=3)
    with pytest.raises(ArchivistError) as stopped:
        archivist.ingest([str(root)], "docs", embed=FAST)
    message = str(stopped.value)
    assert "Ingest stopped" in message and "llama runner process has terminated" in message
    assert "run the same command again to finish" in message


# Requests go out ahead of storing, so an interruption is set at a known request: the dimension
# probe, then [a0, b0] and [b1, b2] are answered (FAST sends two chunks a request, one at a
# time); the fourth request fails, with b.md half stored.
ANSWERED_BEFORE_FAILING = 3


@pytest.mark.parametrize("how", ["server error", "ollama dies"])
def test_an_interrupted_ingest_leaves_no_duplicates_and_a_rerun_finishes(
    archivist, ollama, tmp_path, how
):
    root = write_files(tmp_path / "kb", CORPUS)
    if how == "server error":
        ollama.fail(
            "/api/embed", 500, "llama runner process has terminated", 3, ANSWERED_BEFORE_FAILING
        )
    else:
        ollama.stop_after("/api/embed", ANSWERED_BEFORE_FAILING)
    with pytest.raises(ArchivistError, match="run the same command again"):
        archivist.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    ollama.start()
    store = KnowledgeStore(archivist._client, "docs")
    sources = store.sources()
    assert sources["a.md"].complete
    assert 0 < sources["b.md"].chunks < sources["b.md"].expected_chunks  # half stored
    assert not sources["b.md"].complete
    assert "c.md" not in sources
    ollama.clear_requests()
    report = archivist.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    assert report.unchanged == ["a.md"]
    assert [s["source"] for s in report.stored] == ["b.md", "c.md"]
    assert all(info.complete for info in store.sources().values())
    archivist.ingest([str(root)], "clean", embed=FAST, chunk_size=200, chunk_overlap=0)
    assert point_ids(archivist, "docs") == point_ids(archivist, "clean")
    assert store.count() == KnowledgeStore(archivist._client, "clean").count()


def _minilm(archivist, settings):
    other = Archivist(settings.with_overrides(embed_model="all-minilm"))
    other.__dict__["client"] = archivist._client
    return other


def test_reindex_rebuilds_for_a_new_model_and_keeps_the_old_store_until_done(
    archivist, settings, ollama, tmp_path
):
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(root)], "docs", description="three files", embed=FAST)
    store = KnowledgeStore(archivist._client, "docs")
    before = store.count()
    other = _minilm(archivist, settings)

    # The probe and [a0, b0] are answered; b.md's next request fails.
    ollama.fail("/api/embed", 503, "server busy", times=3, after=2)
    with pytest.raises(ArchivistError, match="Store 'docs' is untouched"):
        other.ingest([str(root)], "docs", reindex=True, embed=FAST)
    # The old store still answers with the old model; the half-built one is not listed.
    assert store.fingerprint["embed_model"] == "nomic-embed-text" and store.count() == before
    assert archivist.search("alpha", "docs")[0]["source"] == "a.md"
    assert list_stores(archivist._client) == ["docs"]
    assert store.rebuild_store().exists()

    ollama.clear_requests()
    report = other.ingest([str(root)], "docs", reindex=True, embed=FAST)
    assert report.reindexed is True
    assert report.unchanged == ["a.md"]  # the interrupted rebuild was resumed
    assert store.fingerprint["embed_model"] == "all-minilm"
    assert store.fingerprint["dimension"] == 384
    assert store.description == "three files"
    assert not store.rebuild_store().exists()
    assert all(info.complete for info in store.sources().values())
    assert other.search("gamma last", "docs")[0]["source"] == "c.md"
    assert {b["model"] for b in ollama.requests_to("/api/embed")} == {"all-minilm"}

    # Once rebuilt, --reindex with the same model is an ordinary incremental run.
    report = other.ingest([str(root)], "docs", reindex=True, embed=FAST)
    assert report.reindexed is False and report.chunks_embedded == 0


class Killed(BaseException):
    """Stands for the process dying at the exact step."""


def test_an_update_killed_before_removing_the_old_version_is_finished_by_the_next_run(
    archivist, ollama, tmp_path, monkeypatch
):
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(root)], "docs", embed=FAST)
    (root / "b.md").write_text("# B\n\nBeta was rewritten.")

    def dies(*args, **kwargs):
        raise Killed

    # b.md's new version is stored whole; the run dies before its old chunks are removed.
    with monkeypatch.context() as patch:
        patch.setattr(KnowledgeStore, "delete_stale", dies)
        with pytest.raises(Killed):
            archivist.ingest([str(root)], "docs", embed=FAST)
    store = KnowledgeStore(archivist._client, "docs")
    assert store.sources()["b.md"].complete
    assert any("Tents and boots" in c["text"] for c in store.chunks(["b.md"]))

    ollama.clear_requests()
    report = archivist.ingest([str(root)], "docs", embed=FAST)
    assert report.unchanged == ["a.md", "b.md", "c.md"] and report.chunks_embedded == 0
    assert [c["text"] for c in store.chunks(["b.md"])] == ["# B\n\nBeta was rewritten."]
    archivist.ingest([str(root)], "clean", embed=FAST)
    assert point_ids(archivist, "docs") == point_ids(archivist, "clean")


def _stopped_amid_a_new_version(archivist, ollama, tmp_path):
    """A store of CORPUS, then a run stopped by Ollama while it stored b.md's new version:
    the probe is not sent (the store exists), [b0, b1] is answered, then the run stops."""
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    (root / "b.md").write_text(LONG.replace("Tents", "Stoves"))
    ollama.fail("/api/embed", 500, "llama runner process has terminated", 3, 1)
    with pytest.raises(ArchivistError):
        archivist.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    return root


def test_a_newer_partly_stored_version_is_kept_for_the_next_run_to_finish(
    archivist, ollama, tmp_path
):
    root = _stopped_amid_a_new_version(archivist, ollama, tmp_path)
    store = KnowledgeStore(archivist._client, "docs")
    assert store.finish_replacements() == []
    texts = [c["text"] for c in store.chunks(["b.md"])]
    assert any("Stoves" in t for t in texts) and any("Tents" in t for t in texts)
    report = archivist.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    assert [s["source"] for s in report.stored] == ["b.md"]
    assert not any("Tents" in c["text"] for c in store.chunks(["b.md"]))


@pytest.mark.parametrize("next_command", ["stores", "search", "ingest --reindex"])
def test_a_rebuild_swap_killed_after_dropping_the_store_is_finished_by_the_next_command(
    archivist, settings, ollama, tmp_path, monkeypatch, next_command
):
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(root)], "docs", embed=FAST)
    store = KnowledgeStore(archivist._client, "docs")
    other = _minilm(archivist, settings)
    clean = other.ingest([str(root)], "clean", embed=FAST).points

    def dies(*args, **kwargs):
        raise Killed

    # The old store is dropped and its replacement created; the copy never starts.
    with monkeypatch.context() as patch:
        patch.setattr("archivist.tools.store.copy_points", dies)
        with pytest.raises(Killed):
            other.ingest([str(root)], "docs", reindex=True, embed=FAST)
    assert store.count() == 0 and store.rebuild_store().count() == clean

    ollama.clear_requests()
    if next_command == "stores":
        listed = {s["store"]: s for s in other.stores()}
        assert listed["docs"]["chunks"] == clean
        assert listed["docs"]["embed_model"] == "all-minilm"
    elif next_command == "search":
        assert other.search("gamma last", "docs")[0]["source"] == "c.md"
    else:
        report = other.ingest([str(root)], "docs", reindex=True, embed=FAST)
        assert report.chunks_embedded == 0 and report.reindexed is False
    assert point_ids(archivist, "docs") == point_ids(archivist, "clean")
    assert not store.rebuild_store().exists()
    # The swap re-embedded nothing: only the search's own query, if any, reached Ollama.
    assert len(ollama.requests_to("/api/embed")) <= (next_command == "search")


def test_a_users_store_named_like_a_scratch_collection_stays_the_users(
    archivist, settings, tmp_path
):
    private = write_files(
        tmp_path / "private", {"secret.md": "# Secret\n\nThe vault code is 4711."}
    )
    root = write_files(tmp_path / "kb", CORPUS)
    archivist.ingest([str(private)], "docs__rebuild", embed=FAST)
    archivist.ingest([str(root)], "docs", embed=FAST)
    assert [s["store"] for s in archivist.stores()] == ["docs", "docs__rebuild"]

    _minilm(archivist, settings).ingest([str(root)], "docs", reindex=True, embed=FAST)
    assert list(KnowledgeStore(archivist._client, "docs").sources()) == ["a.md", "b.md", "c.md"]
    assert list(KnowledgeStore(archivist._client, "docs__rebuild").sources()) == ["secret.md"]
    assert [s["store"] for s in archivist.stores()] == ["docs", "docs__rebuild"]
    copy = connect(tmp_path / "copy")
    try:
        copied = copy_stores(archivist._client, copy)
        assert [c["store"] for c in copied] == ["docs", "docs__rebuild"]
    finally:
        copy.close()


def test_default_chunk_sizes_shrink_to_fit_a_small_embedding_context(archivist, settings, tmp_path):
    root = write_files(tmp_path / "kb", CORPUS)
    other = _minilm(archivist, settings)
    # The fake all-minilm reads 512 tokens: (512 - 16) × 3 characters ÷ 2 for whole blocks.
    report = other.ingest([str(root)], "small", embed=FAST)
    assert report.to_dict()["splitter"] == {"chunk_size": 744, "chunk_overlap": 111}
    with pytest.raises(ArchivistError) as refused:
        other.ingest([str(root)], "small", chunk_size=2000)
    assert "--chunk-size 2000 is too large for all-minilm" in str(refused.value)
    assert "Use --chunk-size 744 or less" in str(refused.value)
    report = archivist.ingest([str(root)], "docs", embed=FAST)
    assert report.to_dict()["splitter"] == {"chunk_size": 1000, "chunk_overlap": 150}


def test_splitter_limits_follow_the_context():
    settings = SplitterSettings()
    assert settings.limits(2048) == (3048, 1016)
    fitted = settings.fitted(512)
    assert (fitted.chunk_size, fitted.cjk_chunk_size) == (744, 248)
    assert fitted.cjk_chunk_overlap == 37
    assert settings.fitted(8192) == settings
    resized = settings.resized(400, 40)
    assert (resized.chunk_size, resized.cjk_chunk_size, resized.cjk_chunk_overlap) == (400, 200, 20)
    with pytest.raises(ValueError, match="larger than the overlap"):
        settings.resized(100, 100)


def test_the_report_prints_the_keys_ingest_json_always_had(archivist, tmp_path):
    root = write_files(tmp_path / "kb", {"a.md": "# A\n\nalpha"})
    report = archivist.ingest([str(root)], "docs", embed=FAST, shard="1/1")
    assert list(report.to_dict()) == [
        "store",
        "files",
        "stored",
        "unchanged",
        "failed",
        "skipped",
        "removed",
        "renamed",
        "chunks_embedded",
        "shard",
        "reindexed",
        "points",
        "splitter",
        "seconds",
    ]
    assert report.to_dict()["shard"] == "1/1" and report.seconds >= 0
    with pytest.raises(TypeError):
        archivist.ingest(IngestRequest.build([str(root)], "docs"), "docs")


def test_the_partly_stored_versions_searches_leave_out_are_counted_once_until_a_write(
    archivist, ollama, tmp_path, monkeypatch
):
    from archivist.tools.catalog import SourceCatalog
    from archivist.tools.edge import EdgeClient

    root = _stopped_amid_a_new_version(archivist, ollama, tmp_path)
    path = archivist._client.path
    archivist.close()
    counted = []
    count = SourceCatalog._count_partial

    def counting(self):
        counted.append(1)
        return count(self)

    monkeypatch.setattr(SourceCatalog, "_count_partial", counting)

    def partial() -> list[str]:
        """The partly stored versions as a process of its own finds them."""
        client = EdgeClient(path)
        try:
            return [v.split('"')[1] for v in KnowledgeStore(client, "docs").partial_versions()]
        finally:
            client.close()

    # Counted by the first process, read back by the next: no write came between.
    assert partial() == ["b.md"] and partial() == ["b.md"] and len(counted) == 1
    finishing = Archivist(archivist.settings)
    try:
        finishing.ingest([str(root)], "docs", embed=FAST, chunk_size=200, chunk_overlap=0)
    finally:
        finishing.close()
    assert partial() == [] and partial() == [] and len(counted) == 2
