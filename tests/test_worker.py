"""The ingest's helper process (splitting, sparse vectors): the same store with it as without
it, whatever it does."""

import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import ROOT, write_files
from fake_ollama import FakeOllama
from processes import wait_for

from archivist.ingest import sync
from archivist.ingest import worker as ingest_worker
from archivist.ingest.splitter import SplitterSettings, split_text
from archivist.ingest.worker import Worker
from archivist.tools import sparse
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import Stored
from archivist.tools.store import KnowledgeStore

sys.path.insert(0, str(ROOT / "benchmarks"))
import perf  # noqa: E402

# Answers its first request, then exits: a helper that dies in the middle of a run.
ONE_ANSWER = (
    "import pickle, sys\n"
    "from archivist.ingest.worker import TASKS\n"
    "task, args = pickle.load(sys.stdin.buffer)\n"
    "pickle.dump((True, TASKS[task](*args)), sys.stdout.buffer)\n"
    "sys.stdout.buffer.flush()\n"
)


@pytest.fixture
def corpus(tmp_path):
    rng = random.Random(7)
    files = {
        f"part{i % 3}/doc{i:02}.md": perf._chinese(rng, 1500) if i % 2 else perf._english(rng, 1500)
        for i in range(24)
    }
    files["codes.txt"] = "Order NW-TX-2290 ships v1.2.3 firmware; 订单 NW-TX-2290 已发货。"
    return write_files(tmp_path / "kb", files)


@pytest.fixture
def in_process_calls(monkeypatch):
    """Count the document vectors this process makes itself (the helper's are not counted)."""
    made = []
    plain = KnowledgeStore.sparse_encoder

    def counting(self):
        encoder = plain(self)

        def document(text):
            made.append(text)
            return encoder.document(text)

        return sparse.SparseEncoder(encoder.scheme, document, encoder.query)

    monkeypatch.setattr(KnowledgeStore, "sparse_encoder", counting)
    return made


@pytest.fixture
def in_process_splits(monkeypatch):
    """Count the texts this process splits itself."""
    split = []

    def counted(text, settings=None):
        split.append(text)
        return split_text(text, settings)

    monkeypatch.setattr(sync, "split_text", counted)
    return split


@pytest.fixture
def helpers(monkeypatch):
    """The helper processes started, as they are started."""
    started = []
    plain = Worker._started

    def recorded(self):
        was = self._process
        ok = plain(self)
        if ok and was is None:
            started.append(self._process)
        return ok

    monkeypatch.setattr(Worker, "_started", recorded)
    return started


def stored(archivist, store):
    """Every point of a store by id: payload (without its ingest time) and both vectors."""
    found, offset = {}, None
    while True:
        batch, offset = archivist._client.scroll(store, limit=256, offset=offset, with_vectors=True)
        for p in batch:
            payload = {k: v for k, v in p.payload.items() if k not in ("ingested_at", "version")}
            bm25 = p.vector["bm25"]
            found[str(p.id)] = (payload, p.vector["dense"], (bm25.indices, bm25.values))
        if offset is None:
            return found


def ingest_in_process(archivist, corpus, monkeypatch, store="plain"):
    with monkeypatch.context() as patch:
        patch.setattr(ingest_worker, "MIN_CHARS", 10**12)
        return archivist.ingest([str(corpus)], store)


def test_an_ingest_with_the_helper_stores_exactly_what_one_without_it_stores(
    archivist, corpus, monkeypatch, in_process_calls, in_process_splits, helpers
):
    report = ingest_in_process(archivist, corpus, monkeypatch)
    assert len(in_process_calls) == report.points > 50
    assert len(in_process_splits) == report.files == 25
    assert helpers == []
    in_process_calls.clear()
    in_process_splits.clear()
    monkeypatch.setattr(ingest_worker, "MIN_CHARS", 0)
    with_helper = archivist.ingest([str(corpus)], "helped")
    assert len(helpers) == 1 and helpers[0].returncode == 0  # stopped at the end of the run
    assert in_process_calls == []  # every vector came from the helper
    # The helper starts once the first batch (16 files) is loaded; it splits the rest.
    assert len(in_process_splits) == 16
    assert with_helper.failed == report.failed == []
    assert stored(archivist, "helped") == stored(archivist, "plain")


def test_a_small_ingest_starts_no_helper(
    archivist, corpus, in_process_calls, in_process_splits, helpers
):
    report = archivist.ingest([str(corpus / "part0")], "docs")
    assert report.points > 0
    assert helpers == []
    assert len(in_process_calls) == report.points
    assert len(in_process_splits) == report.files == 8


@pytest.mark.parametrize(
    "command",
    [
        ["/nonexistent/python"],
        [sys.executable, "-c", "pass"],
        [sys.executable, "-c", ONE_ANSWER],
        [sys.executable, "-c", "import sys; print('garbage'); sys.stdin.read()"],
        [sys.executable, "-c", "import sys; sys.stdin.read()"],
    ],
    ids=["cannot-start", "exits-at-once", "dies-after-one-answer", "answers-garbage", "stuck"],
)
def test_a_helper_that_fails_changes_nothing_but_speed(
    archivist, corpus, monkeypatch, in_process_calls, in_process_splits, command
):
    plain = ingest_in_process(archivist, corpus, monkeypatch)
    in_process_calls.clear()
    in_process_splits.clear()
    monkeypatch.setattr(ingest_worker, "MIN_CHARS", 0)
    monkeypatch.setattr(Worker, "command", command)
    monkeypatch.setattr(ingest_worker, "WAIT_S", 0.2)  # a stuck helper is given up at once
    report = archivist.ingest([str(corpus)], "helped")
    assert report.failed == [] and report.points == plain.points
    assert 0 < len(in_process_calls) <= report.points
    assert len(in_process_splits) == report.files  # nothing was split by the helper
    assert stored(archivist, "helped") == stored(archivist, "plain")


def test_a_file_that_cannot_be_read_fails_alone_with_the_same_reason(
    archivist, corpus, monkeypatch, in_process_splits
):
    # Named to come last, in the batch the helper splits.
    write_files(
        corpus,
        {"zz/broken.pdf": b"not a pdf", "zz/nul.md": b"\0\0 broken", "zz/blank.md": " \n\t\n"},
    )
    plain = ingest_in_process(archivist, corpus, monkeypatch)
    in_process_splits.clear()
    monkeypatch.setattr(ingest_worker, "MIN_CHARS", 0)
    report = archivist.ingest([str(corpus)], "helped")
    assert [f["source"] for f in report.failed] == ["zz/broken.pdf", "zz/nul.md"]
    assert report.failed == plain.failed
    assert report.skipped == plain.skipped
    assert {"source": "zz/blank.md", "reason": "no text in the file"} in report.skipped
    assert len(in_process_splits) == 16  # the first batch: the helper splits the rest
    assert stored(archivist, "helped") == stored(archivist, "plain")


def test_ctrl_c_stops_the_helper_with_the_ingest(archivist, corpus, monkeypatch, helpers):
    monkeypatch.setattr(ingest_worker, "MIN_CHARS", 0)
    sessions = []

    def interrupt(event):
        if isinstance(event, Stored):
            sessions.append(os.getsid(helpers[0].pid))
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        archivist.ingest([str(corpus)], "docs", on_progress=interrupt)
    [helper] = helpers
    assert helper.returncode == 0  # waited for: no orphan left behind
    # It ran in a session of its own: the terminal's Ctrl-C goes to the ingest alone.
    assert sessions == [helper.pid] != [os.getsid(0)]
    report = archivist.ingest([str(corpus)], "docs")  # the next run finishes the job
    assert report.failed == [] and report.points > 50


@pytest.mark.parametrize("scheme", sparse.SCHEMES)
def test_the_helper_answers_each_request_in_order_and_survives_a_bad_one(scheme):
    helper = Worker(scheme)
    document_vector = sparse.encoder(scheme).document
    texts = ["Refunds are paid within 30 days.", "退款在三十天内支付。", ""]
    small = SplitterSettings().resized(200, 40)
    document = "# Refunds\n\n" + "Refunds are paid within 30 days. " * 20
    try:
        first = helper.vectors(texts)
        helper.scheme = "no-such-scheme"
        refused = helper.vectors(texts[:1])
        helper.scheme = scheme
        split = helper.split([document, "退款在三十天内支付。" * 40], small)
        last = helper.vectors(texts[1:])
        assert first.result(timeout=60) == [document_vector(t) for t in texts]
        assert refused.result(timeout=60) is None
        assert split.result(timeout=60) == [
            split_text(document, small),
            split_text("退款在三十天内支付。" * 40, small),
        ]
        assert len(split.result()[0]) > 2
        assert last.result(timeout=60) == [document_vector(t) for t in texts[1:]]
        assert not helper.broken
    finally:
        helper.close()
    assert helper.broken
    assert helper.vectors(texts).result(timeout=1) is None  # closed: the caller makes them


@pytest.mark.parametrize("scheme", sparse.SCHEMES)
def test_document_vectors_are_the_schemes_and_refuse_one_they_do_not_make(scheme):
    texts = ["Refunds are paid within 30 days.", "退款在三十天内支付。"]
    vectors = [sparse.encoder(scheme).document(t) for t in texts]
    assert sparse.document_vectors(texts, scheme) == vectors
    with pytest.raises(ArchivistError, match="no-such-scheme"):
        sparse.document_vectors(texts, "no-such-scheme")


def _helpers_marked(mark: str) -> list[int]:
    """The helper processes whose environment carries `mark` (inherited from one CLI run)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if (
                mark.encode() in (proc / "environ").read_bytes()
                and b"ingest.worker" in (proc / "cmdline").read_bytes()
            ):
                found.append(int(proc.name))
        except (OSError, ValueError):
            continue  # not a process, or one that ended or is not ours to read
    return found


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads /proc (Linux)")
def test_ctrl_c_at_the_terminal_stops_a_cli_ingest_and_its_helper(tmp_path):
    rng = random.Random(3)
    files = {
        f"doc{i:03}.md": perf._chinese(rng, 4000) if i % 2 else perf._english(rng, 4000)
        for i in range(160)
    }
    root = write_files(tmp_path / "kb", files)  # 640,000 characters: the helper starts
    mark = f"ARCHIVIST_TEST_MARK={uuid.uuid4().hex}"
    with FakeOllama(embed_delay_per_text=0.005, embed_concurrency=1) as ollama:
        env = {
            **os.environ,
            "OLLAMA_HOST": ollama.url,
            "ARCHIVIST_HOME": str(tmp_path / "home"),
            mark.split("=")[0]: mark.split("=")[1],
        }
        # In a process group of its own, as a terminal's foreground job is.
        ingest = subprocess.Popen(
            [sys.executable, "-m", "archivist", "ingest", str(root), "--store", "kb"],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            wait_for(lambda: _helpers_marked(mark), "the helper process")
            [helper] = _helpers_marked(mark)
            assert os.getsid(helper) == helper != os.getsid(ingest.pid)  # its own session
            os.killpg(ingest.pid, signal.SIGINT)  # what Ctrl-C at the terminal does
            out, err = ingest.communicate(timeout=60)
        finally:
            ingest.kill()
    assert ingest.returncode == 130, err
    assert "Interrupted" in out + err and "Traceback" not in out + err
    assert _helpers_marked(mark) == []  # waited for: no orphan left behind
