"""`./run`: two shells starting it at once install into `.venv` once, one after the other;
`--with EXTRA` installs any extra of pyproject.toml before the command."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
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
    if [[ -n "${PIP_ARGS:-}" ]]; then echo "$*" >>"$PIP_ARGS"; fi
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


def test_with_installs_any_extra_then_runs_the_command(tmp_path):
    repo, bin_dir = tmp_path / "repo", tmp_path / "bin"
    repo.mkdir()
    bin_dir.mkdir()
    shutil.copy(ROOT / "run", repo / "run")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "go").touch()
    pip_args = tmp_path / "pip-args"
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        "INSTALL_LOG": str(tmp_path / "install.log"),
        "INSTALL_GO": str(tmp_path / "go"),
        "PIP_ARGS": str(pip_args),
    }

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(repo / "run"), *args], cwd=repo, env=env, capture_output=True, text=True
        )

    done = run("--with", "web", "chat", "--store", "s")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "archivist chat --store s\n"
    assert pip_args.read_text().split()[-2:] == ["-e", ".[web]"]
    assert "Installing Archivist with web" in done.stderr
    # More extras, as a list or repeated: what was installed stays, nothing else is asked.
    done = run("--with", "ocr,community", "--with=web")
    assert done.returncode == 0, done.stderr
    assert pip_args.read_text().splitlines()[-1].split()[-1] == ".[community,ocr,web]"
    assert done.stdout == ""
    assert done.stderr.endswith("Archivist in .venv has the extras: community,ocr,web.\n")
    installs = len(pip_args.read_text().splitlines())
    done = run("--with", "web", "--version")
    assert done.returncode == 0 and done.stdout == "archivist --version\n"
    assert len(pip_args.read_text().splitlines()) == installs  # already there
    # An extra pyproject.toml does not declare is refused, naming those it does.
    done = run("--with", "webb", "chat")
    assert done.returncode == 2 and done.stdout == ""
    assert "There is no extra 'webb'. Extras: bench,community,dev,notebook,ocr,server,web." in (
        done.stderr
    )
    done = run("--with")
    assert done.returncode == 2 and "--with needs an extra: ./run --with web" in done.stderr


def test_install_messages_name_the_command_for_the_way_archivist_was_installed(
    tmp_path, monkeypatch
):
    from archivist.ingest.request import IngestRequest
    from archivist.tools.errors import ArchivistError, install_command

    checkout = tmp_path / "checkout"
    (checkout / ".venv").mkdir(parents=True)
    (checkout / "run").write_text("#!/usr/bin/env bash\n")
    venv = str(checkout / ".venv")
    # A venv ./run did not make (no stamp): pip, as for any installed package.
    assert install_command("web", venv, checkout) == "pip install 'archivist[web]'"
    (checkout / ".venv" / ".pyproject.sha256").write_text("abc dev\n")
    assert install_command("web", venv, checkout) == "./run --with web"
    assert install_command("ocr", venv, tmp_path) == f"{checkout / 'run'} --with ocr"
    # A message naming an extra, from the Archivist running in that checkout's venv.
    monkeypatch.setattr("sys.prefix", venv)
    monkeypatch.chdir(checkout)
    monkeypatch.setattr("archivist.ingest.request.available", lambda: False)
    with pytest.raises(ArchivistError) as caught:
        IngestRequest.build(["https://example.com/docs/"], "docs")
    assert caught.value.fix == "Install it: ./run --with web"
