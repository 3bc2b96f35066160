"""A full disk and a home that cannot be written: a message that says what and where, no
traceback, no crash, and what was stored is kept.

The embedded store maps its files; on a real full disk it used to die with SIGBUS (exit 135,
no message). The tests that need a real small or read-only filesystem mount a tmpfs (root
only) and are skipped, saying why, where mounting is not allowed.
"""

import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import run_cli
from processes import INGEST, corpus

COMMANDS = [
    ("stores",),
    ("sources", "--store", "kb"),
    ("search", "lantern", "--store", "kb"),
    ("ask", "What about lanterns?", "--store", "kb"),
    ("chat", "--store", "kb"),
    ("logs",),
    ("ingest", "{root}", "--store", "kb", *INGEST),
]


@contextmanager
def tmpfs(path: Path, options: str) -> Iterator[None]:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): needs root")
    try:
        yield
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


def test_a_disk_filling_up_stops_the_ingest_cleanly_and_a_rerun_finishes(
    ollama, home, tmp_path, monkeypatch
):
    root = corpus(tmp_path / "kb")
    # The disk looks full from the store's fourth check of its room on (every 8 points).
    monkeypatch.setattr("archivist.tools.edge.client.ROOM_CHECK_POINTS", 8)
    real = shutil.disk_usage
    checks = []

    def usage(path):
        checks.append(path)
        found = real(path)
        return found._replace(free=0) if len(checks) > 3 else found

    monkeypatch.setattr("archivist.tools.edge.client.shutil.disk_usage", usage)
    stopped = run_cli(
        "ingest", str(root), "--store", "kb", *INGEST, ollama_url=ollama.url, home=home
    )
    assert stopped.returncode == 1 and "Traceback" not in stopped.stderr
    assert f"The disk holding the embedded store at {home / 'edge'} has 0 MB free" in stopped.stderr
    assert "what was stored is kept" in stopped.stderr
    assert "  stored doc00.md" in stopped.stderr

    monkeypatch.setattr("archivist.tools.edge.client.shutil.disk_usage", real)
    listed = run_cli("sources", "--store", "kb", "--json", ollama_url=ollama.url, home=home)
    kept = [s for s in json.loads(listed.stdout) if s["complete"]]
    assert 0 < len(kept) < 24
    again = run_cli(
        "ingest", str(root), "--store", "kb", *INGEST, "--json", ollama_url=ollama.url, home=home
    )
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert len(report["unchanged"]) == len(kept) and len(report["stored"]) == 24 - len(kept)
    clean = run_cli(
        "ingest", str(root), "--store", "clean", *INGEST, "--json", ollama_url=ollama.url, home=home
    )
    assert report["points"] == json.loads(clean.stdout)["points"]


def test_a_real_full_disk_gives_a_message_not_sigbus_and_room_made_lets_it_finish(ollama, tmp_path):
    root = corpus(tmp_path / "kb")
    disk = tmp_path / "disk"
    with tmpfs(disk, "size=64m"):
        home = disk / "home"
        for args in (("ingest", str(root), "--store", "kb", *INGEST), ("stores",)):
            # A process: SIGBUS would kill pytest itself.
            done = run_cli(*args, ollama_url=ollama.url, home=home, process=True)
            assert done.returncode == 1, (done.returncode, done.stderr)
            assert f"The disk holding the embedded store at {home / 'edge'} has " in done.stderr
            assert "Traceback" not in done.stderr
        subprocess.run(["mount", "-o", "remount,size=1g", str(disk)], check=True)
        done = run_cli(
            "ingest", str(root), "--store", "kb", *INGEST, ollama_url=ollama.url, home=home
        )
        assert done.returncode == 0, done.stderr
        assert "kb\t96 chunks" in run_cli("stores", ollama_url=ollama.url, home=home).stdout


def check_unusable_home(ollama, home: Path, root: Path, reason: str) -> None:
    for command in COMMANDS:
        args = [a.format(root=root) for a in command]
        done = run_cli(*args, ollama_url=ollama.url, home=home, stdin="hi\n/exit\n")
        assert done.returncode == 1, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert "Error: Cannot write " in done.stderr and str(home) in done.stderr, (
            args,
            done.stderr,
        )
        assert reason in done.stderr or "unable to open database file" in done.stderr
        assert "or set ARCHIVIST_HOME to a folder you can write to." in done.stderr


def test_a_home_that_is_not_a_folder_is_named_with_the_fix(ollama, tmp_path):
    (tmp_path / "a-file").write_text("not a folder")
    check_unusable_home(
        ollama, tmp_path / "a-file" / "home", corpus(tmp_path / "kb"), "Not a directory"
    )


def test_a_read_only_home_is_named_with_the_fix_and_its_store_kept(ollama, tmp_path):
    root = corpus(tmp_path / "kb")
    disk = tmp_path / "disk"
    with tmpfs(disk, "size=512m"):
        home = disk / "home"
        made = run_cli(
            "ingest", str(root), "--store", "kb", *INGEST, ollama_url=ollama.url, home=home
        )
        assert made.returncode == 0, made.stderr
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        check_unusable_home(ollama, home, root, "Read-only file system")
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        assert "kb\t96 chunks" in run_cli("stores", ollama_url=ollama.url, home=home).stdout
