"""Ctrl-C during an ingest says what was kept and that re-running resumes."""

from typer.testing import CliRunner

from archivist import cli
from archivist.app import Archivist
from archivist.tools.progress import Stored


def test_ctrl_c_during_an_ingest_says_what_is_kept(monkeypatch, tmp_path):
    def interrupted_ingest(self, request, *, on_progress, release=False):
        for source in ("a.md", "b.md"):
            on_progress(Stored(source, 1))
        raise KeyboardInterrupt

    monkeypatch.setattr(Archivist, "ingest", interrupted_ingest)
    done = CliRunner().invoke(cli.app, ["ingest", str(tmp_path), "--store", "kb"])
    assert done.exit_code == 130
    assert "Interrupted: 2 documents stored in this run are kept." in done.output
    assert "Run the same command again to resume" in done.output
