"""The per-file time budget: a file whose load never ends (a loader looping, as a hostile
file can make one loop) fails with the limit and the setting that raises it, the files
beside it are stored, what the store held of it is kept, and the ingest ends. The loaders
that misbehave are tests/misbehaving_loaders.py's, named with `--loader`; they hold the CPU
for a minute, so an ingest without the budget would store them after that and fail these
tests rather than hang them."""

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, write_files

from archivist.ingest.loaders import LoaderOptions
from archivist.ingest.loading import OCR_FACTOR, SETTING
from archivist.ingest.request import IngestRequest
from archivist.settings import load_settings
from archivist.tools.errors import ArchivistError
from archivist.tools.progress import Failed, Recognised

# The default budget as the app has it: the loading child (tests/conftest.py).
pytestmark = pytest.mark.loading_child

TESTS = Path(__file__).parent
ENDLESS = "*.slow=misbehaving_loaders:EndlessLoader"
GOOD = {
    "refunds.md": "# Refunds\n\nRefunds are paid within 30 days.",
    "notes.txt": "Plain text notes about the warranty: two years on all products.",
    "guide/shipping.md": "# Shipping\n\nStandard shipping takes 3 to 5 business days.",
}


@pytest.fixture(autouse=True)
def loaders_importable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loading process imports the misbehaving loaders from this folder."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def test_a_load_past_the_budget_fails_its_file_alone_and_keeps_what_was_stored(archivist, tmp_path):
    root = write_files(tmp_path / "kb", {**GOOD, "stuck.slow": "An honest first version."})
    first = archivist.ingest([str(root)], "kb", text_extensions=[".slow"])
    assert {s["source"] for s in first.stored} == {*GOOD, "stuck.slow"}
    kept = archivist.store("kb").sources()["stuck.slow"]

    # The file changes, and its loader now never ends; the good files change too.
    (root / "stuck.slow").write_text("A version that makes its loader loop.", encoding="utf-8")
    for name in GOOD:
        (root / name).write_text(GOOD[name] + "\n\nUpdated.", encoding="utf-8")
    events = []
    request = IngestRequest.build([str(root)], "kb", prune=True, loaders=[ENDLESS], load_timeout=2)
    report = archivist.ingest(request, on_progress=events.append)

    assert {s["source"] for s in report.stored} == set(GOOD)
    [failed] = report.failed
    assert failed["source"] == "stuck.slow"
    reason = failed["reason"]
    assert "longer than the 2 s limit per file" in reason
    assert f"--load-timeout 4 or {SETTING}=4 (0: no limit)" in reason
    assert Failed("stuck.slow", reason) in events
    # Its earlier version stays whole in the store, even with --prune.
    sources = archivist.store("kb").sources()
    assert set(sources) == {*GOOD, "stuck.slow"}
    assert sources["stuck.slow"] == kept


def test_the_cli_reports_the_file_past_the_budget_and_exits_1(ollama, home, tmp_path, monkeypatch):
    root = write_files(tmp_path / "kb", {**GOOD, "stuck.slow": "Never read."})
    monkeypatch.setenv(SETTING, "1.5")
    done = run_cli(
        "ingest", str(root), "--store", "kb", "--loader", ENDLESS, "--json",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    report = json.loads(done.stdout)
    assert sorted(s["source"] for s in report["stored"]) == sorted(GOOD)
    assert [f["source"] for f in report["failed"]] == ["stuck.slow"]
    assert "1.5 s limit per file" in report["failed"][0]["reason"]
    assert f"{SETTING}=3 " in report["failed"][0]["reason"]

    # The flag overrides the setting; the summary lists the file with its reason.
    plain = run_cli(
        "ingest", str(root), "--store", "kb", "--loader", ENDLESS, "--load-timeout", "1",
        ollama_url=ollama.url, home=home,
    )  # fmt: skip
    assert plain.returncode == 1
    assert "failed: stuck.slow: loading took longer than the 1 s limit per file" in plain.stdout
    assert "--load-timeout 2 or ARCHIVIST_LOAD_TIMEOUT=2" in plain.stdout


def test_a_load_reading_pages_by_ocr_gets_the_ocr_budget(archivist, tmp_path):
    root = write_files(tmp_path / "kb", {**GOOD, "scan.slow": "Pages of pictures."})
    events = []
    request = IngestRequest.build(
        [str(root)],
        "kb",
        loaders=["*.slow=misbehaving_loaders:EndlessOcrLoader"],
        load_timeout=1,
    )
    report = archivist.ingest(request, on_progress=events.append)
    assert {s["source"] for s in report.stored} == set(GOOD)
    [failed] = report.failed
    assert failed["reason"].startswith(f"OCR took longer than the {OCR_FACTOR} s limit")
    # The loading process's progress reaches the ingest's listener.
    assert Recognised("scan.slow", 1, 3) in events


def test_a_loading_process_that_dies_fails_its_file_and_the_next_files_load(archivist, tmp_path):
    files = {f"{n}-{name}": GOOD[name] for n in range(2) for name in ("refunds.md", "notes.txt")}
    root = write_files(tmp_path / "kb", {**files, "crash.slow": "Kills its reader."})
    request = IngestRequest.build(
        [str(root)], "kb", loaders=["*.slow=misbehaving_loaders:CrashingLoader"]
    )
    report = archivist.ingest(request)
    assert {s["source"] for s in report.stored} == set(files)
    [failed] = report.failed
    assert failed["source"] == "crash.slow"
    assert failed["reason"].startswith("reading it stopped the loading process (SIGKILL)")


def test_a_loading_process_left_alone_in_an_endless_load_ends_itself(tmp_path):
    path = write_files(tmp_path, {"stuck.slow": "Never read."}) / "stuck.slow"
    options = LoaderOptions(extra_loaders=(("*.slow", ENDLESS.split("=")[1]),))
    child = subprocess.Popen(
        [sys.executable, "-m", "archivist.ingest.worker", "--loads"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(TESTS)},
    )
    try:
        assert pickle.load(child.stdout) == (None, "ready")
        pickle.dump(("load", (path, options, 1.0)), child.stdin)
        child.stdin.flush()
        # Nobody kills it, as when the ingest itself was killed: it ends on its own.
        assert child.wait(timeout=30) == -signal.SIGALRM
    finally:
        child.kill()
        child.wait()


def test_with_the_budget_off_files_load_in_the_ingest_process(archivist, tmp_path, monkeypatch):
    from archivist.ingest import loading

    def no_child(*args, **kwargs):
        raise AssertionError("a loading process was started")

    monkeypatch.setattr(loading, "_Child", no_child)
    root = write_files(tmp_path / "kb", GOOD)
    report = archivist.ingest(IngestRequest.build([str(root)], "kb", load_timeout=0))
    assert {s["source"] for s in report.stored} == set(GOOD) and not report.failed


def test_the_budget_is_read_from_the_setting_and_refuses_what_is_not_a_time():
    assert load_settings({}).load_timeout is None  # the write path's default, 120 s
    assert load_settings({SETTING: "30"}).load_timeout == 30
    assert load_settings({SETTING: "0"}).load_timeout == 0
    for wrong in ("-1", "soon", "nan"):
        with pytest.raises(ArchivistError, match=SETTING):
            load_settings({SETTING: wrong})
    with pytest.raises(ArchivistError, match="or 0 for no limit"):
        IngestRequest.build([], "kb", load_timeout=-5)


def test_a_run_leaves_its_idle_loading_process_to_the_next_run_in_the_same_environment(
    archivist, tmp_path, monkeypatch
):
    from archivist.ingest import loading

    loading._stop_spare()  # one an earlier test left
    started = []

    class Counted(loading._Child):
        def __init__(self) -> None:
            super().__init__()
            started.append(self.process.pid)

    monkeypatch.setattr(loading, "_Child", Counted)
    root = write_files(tmp_path / "kb", GOOD)

    def change_and_ingest(tag: str) -> None:
        for name in GOOD:
            (root / name).write_text(f"{GOOD[name]}\n\n{tag}.", encoding="utf-8")
        report = archivist.ingest([str(root)], "kb")
        assert {s["source"] for s in report.stored} == set(GOOD) and not report.failed

    change_and_ingest("First")
    change_and_ingest("Second")
    assert len(started) == 1  # the second run's loads went to the first run's process
    monkeypatch.setenv("ARCHIVIST_TEST_MARK", "changed")
    change_and_ingest("Third")
    assert len(started) == 2  # another environment: a process of its own
    loading._stop_spare()
