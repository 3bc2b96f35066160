"""Crashes and wrong words: paths that are not files, homes that cannot be folders, names
that print alike, files others could read, a listing of stores an MCP server does not serve."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import run_cli, write_files

from archivist.printable import printable_name


def test_a_device_or_a_pipe_named_directly_is_said_to_be_one_and_skipped(ollama, home, tmp_path):
    done = run_cli("ingest", "/dev/zero", "--store", "kb", ollama_url=ollama.url, home=home)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "Nothing to ingest: /dev/zero is a device, not a file." in done.stderr
    assert not (home / "edge" / "kb").exists()

    good = write_files(tmp_path, {"good.md": "# Good\n\nTents keep the rain out."}) / "good.md"
    pipe = tmp_path / "pipe.md"
    os.mkfifo(pipe)
    done = run_cli(
        "ingest", str(good), str(pipe), "--store", "kb", "--json", ollama_url=ollama.url, home=home
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert [s["source"] for s in report["stored"]] == ["good.md"]
    assert report["failed"] == [
        {"source": str(pipe), "reason": "a named pipe (FIFO), not a file: not read"}
    ]


def test_names_with_zero_width_or_bidirectional_characters_print_apart():
    plain, hidden, reversed_ = "refund.md", "refund\u200b.md", "\u202edm.dnufer"
    assert printable_name(hidden) == "refund\\u200b.md" != printable_name(plain)
    assert printable_name(reversed_) == "\\u202edm.dnufer"
    assert printable_name("caf\u00e9 \u65e5\u672c.md") == "caf\u00e9 \u65e5\u672c.md"


@pytest.mark.parametrize(
    "make_home",
    [lambda tmp: tmp / ("a" * 300), lambda tmp: tmp.parent / "x" / ("b" * 300) / "home"],
    ids=["300-character name", "under a too-long folder"],
)
def test_a_home_that_cannot_be_a_folder_is_refused_with_the_fix(ollama, tmp_path, make_home):
    home = make_home(tmp_path)
    for args in (("stores",), ("search", "tents", "--store", "kb"), ("logs",)):
        done = run_cli(*args, ollama_url=ollama.url, home=home)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "File name too long" in done.stderr
        assert f"Cannot write {home}: File name too long." in done.stderr
        assert "or set ARCHIVIST_HOME to a folder you can write to." in done.stderr


def test_a_home_under_proc_is_refused_with_the_fix(ollama):
    done = run_cli("stores", ollama_url=ollama.url, home=Path("/proc/ah"))
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "Cannot write /proc/ah: No such file or directory." in done.stderr


def test_the_home_and_its_files_are_private_whatever_the_umask(ollama, tmp_path):
    home = tmp_path / "home"
    docs = write_files(tmp_path / "docs", {"a.md": "# A\n\nTents keep the rain out."})
    # Each command starts under a permissive umask, as from a shell (the entry point sets
    # its own for the rest of the process: this one's is put back after).
    before = os.umask(0o022)
    try:
        for args in (("ingest", str(docs), "--store", "kb"), ("ask", "tents?", "--store", "kb")):
            os.umask(0o022)
            done = run_cli(*args, ollama_url=ollama.url, home=home)
            assert done.returncode == 0, done.stderr
    finally:
        os.umask(before)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    loose = [
        (path, oct(stat.S_IMODE(path.stat().st_mode)))
        for path in home.rglob("*")
        if not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) & 0o077
    ]
    assert not loose

    # A home made earlier, open to others, is tightened.
    home.chmod(0o755)
    assert run_cli("stores", ollama_url=ollama.url, home=home).returncode == 0
    assert stat.S_IMODE(home.stat().st_mode) == 0o700


def test_delete_store_that_waited_for_an_ingest_reports_what_it_deleted(ollama, home, tmp_path):
    from processes import wait_for

    from archivist.app import Archivist
    from archivist.settings import Settings

    docs = write_files(tmp_path / "docs", {f"d{i}.md": f"# D{i}\n\nTent {i}." for i in range(2)})
    more = write_files(tmp_path / "more", {f"m{i}.md": f"# M{i}\n\nStove {i}." for i in range(3)})
    assert (
        run_cli("ingest", str(docs), "--store", "kb", ollama_url=ollama.url, home=home).returncode
        == 0
    )
    app = Archivist(Settings(ollama_host=ollama.url, home=home))
    err = tmp_path / "delete.err"
    env = {**os.environ, "ARCHIVIST_HOME": str(home), "OLLAMA_HOST": ollama.url}
    try:
        with app.writing():  # an ingest under way: the delete waits for it
            with err.open("w") as err_file:
                delete = subprocess.Popen(
                    [sys.executable, "-m", "archivist", "delete", "--store", "kb", "--yes"],
                    env=env, stdout=subprocess.PIPE, stderr=err_file, text=True,
                )  # fmt: skip
            wait_for(lambda: "Waiting for the store" in err.read_text(), "the delete to wait")
            app.ingest([str(more)], "kb")
            app.close()
        out, _ = delete.communicate(timeout=120)
    finally:
        app.close()
    assert delete.returncode == 0, err.read_text()
    assert out.strip() == "Deleted the store 'kb' (5 chunks)."
