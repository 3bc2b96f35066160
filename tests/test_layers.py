"""The layers hold: `lint-imports` checks pyproject.toml's contracts on the package as installed.

The folders at the top of the repository (tools/, ingest/, agent/) are mapped into `archivist`
by setuptools, so the import graph is read from a copy laid out as the installed package is.
grimp reads every import statement, those inside functions and under TYPE_CHECKING too.
"""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAPPED = {"agent": "agent", "ingest": "ingest", "tools": "tools"}


def installed_layout(target: Path) -> Path:
    """Copy the package's sources into `target` as `archivist/` is installed; return it."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    package = target / "archivist"
    shutil.copytree(ROOT / "archivist", package, ignore=ignore)
    for folder, name in MAPPED.items():
        shutil.copytree(ROOT / folder, package / name, ignore=ignore)
    return target


def lint_imports(layout: Path) -> subprocess.CompletedProcess:
    command = "from importlinter.cli import lint_imports_command; lint_imports_command()"
    return subprocess.run(
        [sys.executable, "-c", command, "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=layout,
        env={"PYTHONPATH": str(layout), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_layers_keep_their_contracts(tmp_path):
    done = lint_imports(installed_layout(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


def test_an_upward_import_inside_a_function_breaks_a_contract(tmp_path):
    layout = installed_layout(tmp_path)
    with open(layout / "archivist" / "ingest" / "urls.py", "a") as module:
        module.write(
            "\n\ndef _settings():\n    from archivist import settings\n\n    return settings\n"
        )
    done = lint_imports(layout)
    assert done.returncode == 1
    assert "archivist.ingest is not allowed to import archivist.settings" in done.stdout
    assert "archivist.ingest.urls -> archivist.settings" in done.stdout
