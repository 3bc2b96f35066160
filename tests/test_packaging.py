"""Packaging: one import name, `archivist`, and nothing a user's own files can shadow."""

import subprocess
import sys
import zipfile

import nbformat
from conftest import ROOT, SHOP, run_cli
from nbclient import NotebookClient


def test_the_wheel_installs_only_the_archivist_package_and_the_console_script(tmp_path):
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = tmp_path.glob("archivist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for module in (
        "archivist/__main__.py",
        "archivist/cli.py",
        "archivist/evaluation/run.py",
        "archivist/agent/graph.py",
        "archivist/agent/retrieval.py",
        "archivist/tools/store.py",
        "archivist/ingest/graph.py",
        "archivist/ingest/loaders/__init__.py",
        "archivist/ingest/loaders/office.py",
    ):
        assert module in names
    top = {name.split("/")[0] for name in names}
    assert {n for n in top if not n.endswith(".dist-info")} == {"archivist"}
    assert not top & {"agent", "tools", "ingest", "tests", "examples"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "archivist = archivist.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


SHADOWS = {
    "agent.py": "raise RuntimeError('the user agent.py was imported')\n",
    "tools.py": "def helper():\n    return 'users own tools'\n",
    "ingest.py": "raise RuntimeError('the user ingest.py was imported')\n",
}


def shadowed_folder(tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    for name, text in SHADOWS.items():
        (folder / name).write_text(text)
    return folder


def test_the_cli_runs_from_a_folder_with_its_own_agent_and_tools_modules(tmp_path, ollama, home):
    folder = shadowed_folder(tmp_path)
    ingested = run_cli(
        "ingest", str(SHOP), "--store", "shop_docs", ollama_url=ollama.url, home=home, cwd=folder
    )
    assert ingested.returncode == 0, ingested.stderr
    found = run_cli(
        "search", "refund", "--store", "shop_docs", "--json",
        ollama_url=ollama.url, home=home, cwd=folder,
    )  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert "refund.md" in found.stdout


def test_a_notebook_runs_beside_its_own_agent_and_tools_modules(
    tmp_path, ollama, home, monkeypatch
):
    folder = shadowed_folder(tmp_path)
    monkeypatch.setenv("OLLAMA_HOST", ollama.url)
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("import tools\nassert tools.helper() == 'users own tools'"),
        nbformat.v4.new_code_cell(
            "from archivist import Archivist, load_settings\n"
            "app = Archivist(load_settings())\n"
            f"report = app.ingest([{str(SHOP)!r}], 'shop_docs')\n"
            "hits = app.search('How many days for a refund?', 'shop_docs')\n"
            "app.close()\n"
            "print(hits[0]['source'])"
        ),
    ]
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(folder)}}
    ).execute()
    printed = notebook.cells[1].outputs[0]["text"]
    assert printed.strip().endswith(".md")
