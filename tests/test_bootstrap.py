"""`./run`: two shells starting it at once install into `.venv` once, one after the other."""

import os
import shutil
import subprocess
from pathlib import Path

from conftest import ROOT
from processes import wait_for

# Stands in for python3, the venv's python and pip: an editable install logs its start, then
# waits for the test's go-ahead, so the second ./run certainly arrives while it runs.
FAKE_PYTHON = """#!/usr/bin/env bash
if [[ "$1" == --version ]]; then echo "Python 3.fake"; exit 0; fi
if [[ "$1 $2" == "-m venv" ]]; then
    mkdir -p "$3/bin"
    cp "$0" "$3/bin/python"
    printf '#!/usr/bin/env bash\\necho "archivist $*"\\n' >"$3/bin/archivist"
    chmod +x "$3/bin/archivist"
    exit 0
fi
if [[ "$1 $2" == "-m pip" && "$*" == *" -e "* ]]; then
    echo start >>"$INSTALL_LOG"
    while [[ ! -e "$INSTALL_GO" ]]; do sleep 0.05; done
    echo done >>"$INSTALL_LOG"
fi
"""


def test_a_second_run_waits_for_the_first_ones_install(tmp_path):
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    repo.mkdir()
    bin_dir.mkdir()
    shutil.copy(ROOT / "run", repo / "run")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    python = bin_dir / "python3"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    log, go = tmp_path / "install.log", tmp_path / "go"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "INSTALL_LOG": str(log),
        "INSTALL_GO": str(go),
    }

    def start(name: str) -> tuple[subprocess.Popen, Path]:
        err = tmp_path / f"{name}.err"
        with err.open("w") as file:
            process = subprocess.Popen(
                [str(repo / "run"), "--version"],
                cwd=repo,
                env=env,
                stdout=subprocess.PIPE,
                stderr=file,
                text=True,
            )
        return process, err

    first, _ = start("first")
    try:
        wait_for(lambda: log.exists() and "start" in log.read_text(), "the first install")
        second, second_err = start("second")
        try:
            wait_for(lambda: "waiting for it" in second_err.read_text(), "the second to wait")
            go.touch()
            outputs = [p.communicate(timeout=60)[0] for p in (first, second)]
        finally:
            second.kill()
    finally:
        first.kill()
    assert first.returncode == second.returncode == 0
    assert outputs == ["archivist --version\n"] * 2
    # One install, finished before anything else touched the venv.
    assert log.read_text().split() == ["start", "done"]
    assert "Installing" not in second_err.read_text()
