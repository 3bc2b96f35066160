"""Packaging: one import name, `archivist`, and nothing a user's own files can shadow."""

import os
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, SHOP, run_cli
from nbclient import NotebookClient


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Archivist's wheel, built once for the tests that read or install it."""
    return build_wheel(tmp_path_factory.mktemp("dist"))


def build_wheel(folder: Path) -> Path:
    """Build Archivist's wheel from the checkout into a folder, offline."""
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
            str(folder),
        ],
        check=True,
        capture_output=True,
    )
    [wheel] = folder.glob("archivist-*.whl")
    return wheel


def test_the_wheel_installs_only_the_archivist_package_and_the_console_script(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for module in (
        "archivist/__main__.py",
        "archivist/cli/__init__.py",
        "archivist/evaluation/run.py",
        "archivist/agent/graph.py",
        "archivist/agent/retrieval.py",
        "archivist/tools/store.py",
        "archivist/ingest/graph.py",
        "archivist/ingest/loaders/__init__.py",
        "archivist/ingest/loaders/office.py",
    ):
        assert module in names
    # Every module of the checkout ships: a package left out of pyproject's list is a CLI
    # or a layer a pip-installed Archivist cannot import.
    source = {"archivist": ROOT / "archivist", "archivist/agent": ROOT / "agent"}
    source |= {"archivist/ingest": ROOT / "ingest", "archivist/tools": ROOT / "tools"}
    modules = {
        f"{prefix}/{path.relative_to(folder).as_posix()}"
        for prefix, folder in source.items()
        for path in folder.rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules - set(names) == set()
    assert "archivist/tools/taiwan_terms.tsv" in names  # BM25 folding reads it
    top = {name.split("/")[0] for name in names}
    assert {n for n in top if not n.endswith(".dist-info")} == {"archivist"}
    assert not top & {"agent", "tools", "ingest", "tests", "examples"}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "archivist = archivist.cli:run" in zipfile.ZipFile(wheel).read(entry_points).decode()
    shipped = {n.removeprefix("archivist/samples/shop/") for n in names if "/samples/shop/" in n}
    assert shipped == {p.name for p in SHOP.glob("*.md")}
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA")))
    assert "License-Expression: MIT" in metadata.decode()
    assert "Classifier: Programming Language :: Python :: 3.11" in metadata.decode()


def test_the_wheel_in_a_fresh_venv_chats_on_its_packaged_sample(wheel, tmp_path, ollama):
    """A pip-installed Archivist, run outside the repository, starts as a checkout does."""
    venv = tmp_path / "venv"
    # No pip of its own (installing one costs more than the rest of the test): this
    # environment's pip installs into it.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    # The dependencies come from this test's environment (offline, and fast); Archivist
    # itself only from the wheel: the editable install's import hook lives in a .pth file
    # of that folder, which a path listed in a .pth file does not run.
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python")]
    pip += ["install", "-q", "--no-deps"]
    subprocess.run([*pip, str(wheel)], check=True, capture_output=True)
    home = tmp_path / "fresh-home"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "OLLAMA_HOST": ollama.url, "ARCHIVIST_HOME": str(home)}
    env.pop("PYTHONPATH", None)
    located = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import archivist.cli as c; print(c._sample_kb())"],
        capture_output=True, text=True, env=env, cwd=elsewhere, check=True,
    )  # fmt: skip
    sample = Path(located.stdout.strip())
    assert sample.is_relative_to(site) and (sample / "refund.md").is_file()

    chatted = subprocess.run(
        [str(venv / "bin" / "archivist"), "chat"],
        input="How many days do I have to ask for a refund?\n",
        capture_output=True, text=True, env=env, cwd=elsewhere, timeout=300,
    )  # fmt: skip
    assert chatted.returncode == 0, chatted.stderr
    assert "ingesting the sample knowledge base" in chatted.stderr
    assert chatted.stdout.startswith('search_shop_docs("How many days do I have to ask')
    cited = re.search(r"^Sources: \[1\] (\S+)", chatted.stdout, re.M)
    assert cited and (sample / cited.group(1)).is_file()
    embedded = [t for body in ollama.requests_to("/api/embed") for t in body["input"]]
    assert any("within **30 days** of delivery" in text for text in embedded)


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
    # A process: `python -m archivist` puts its working directory first on the import path.
    ingested = run_cli(
        "ingest", str(SHOP), "--store", "shop_docs",
        ollama_url=ollama.url, home=home, cwd=folder, process=True,
    )  # fmt: skip
    assert ingested.returncode == 0, ingested.stderr
    found = run_cli(
        "search", "refund", "--store", "shop_docs", "--json",
        ollama_url=ollama.url, home=home, cwd=folder, process=True,
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
