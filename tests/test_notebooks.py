"""The notebooks: stored clean, and run top to bottom against the fake Ollama."""

import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from fake_ollama import FakeOllama
from nbclient import NotebookClient

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@dataclass
class Run:
    """A notebook executed against a fresh fake Ollama and a fresh ARCHIVIST_HOME."""

    notebook: nbformat.NotebookNode
    embedded: int
    chat_models: set[str]
    home_used: bool

    @property
    def outputs(self) -> list[dict]:
        return [output for cell in self.notebook.cells for output in cell.get("outputs", [])]


@cache
def run_notebook(name: str) -> Run:
    """Execute a notebook the way CI does; each notebook runs once per test session."""
    path = ROOT / "notebooks" / name
    notebook = nbformat.read(path, as_version=4)
    with (
        FakeOllama() as fake,
        tempfile.TemporaryDirectory() as home,
        pytest.MonkeyPatch.context() as env,
    ):
        # The kernel inherits this environment and finds both through the project's settings.
        env.setenv("OLLAMA_HOST", fake.url)
        env.setenv("ARCHIVIST_HOME", home)
        env.delenv("MPLBACKEND", raising=False)
        client = NotebookClient(
            notebook,
            timeout=120,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        client.execute()  # raises CellExecutionError, naming the cell, when a cell fails
        return Run(
            notebook,
            embedded=len(fake.requests_to("/api/embed")),
            chat_models={request["model"] for request in fake.requests_to("/api/chat")},
            home_used=(Path(home) / "edge").is_dir(),
        )


def shows_table(output: dict) -> bool:
    return "<table" in output.get("data", {}).get("text/html", "")


def test_the_three_notebooks_are_there() -> None:
    assert [path.name for path in NOTEBOOKS] == [
        "01_ingest_and_inspect.ipynb",
        "02_retrieval_lab.ipynb",
        "03_agent_and_evals.ipynb",
    ]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    assert [cell.outputs for cell in code] == [[]] * len(code)
    assert [cell.execution_count for cell in code] == [None] * len(code)
    assert notebook.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_notebook_runs_and_shows_a_figure_and_a_table(path: Path) -> None:
    run = run_notebook(path.name)

    assert not [o for o in run.outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in run.outputs), "no figure"
    assert any(shows_table(o) for o in run.outputs), "no table"
    assert run.embedded, "the notebook did not reach Ollama through OLLAMA_HOST"
    assert run.home_used, "the notebook's stores are not in ARCHIVIST_HOME"


def test_the_agent_notebook_draws_the_graph_and_compares_two_models() -> None:
    run = run_notebook("03_agent_and_evals.ipynb")

    assert run.chat_models == {"qwen2.5:3b", "qwen2.5:0.5b"}
    markdown = [o.get("data", {}).get("text/markdown", "") for o in run.outputs]
    graphs = [text for text in markdown if text.startswith("```mermaid\n")]
    assert graphs and "call_model" in graphs[0] and "run_tools" in graphs[0]
    html = "".join(o.get("data", {}).get("text/html", "") for o in run.outputs)
    assert "restocking" in html.lower()  # the trajectory table holds the retrieved passages
    assert "retrieval_hit@k" in html and "qwen2.5:0.5b (agent)" in html
    # The last cell: the store as a tool and a retriever in LangChain's own create_agent.
    printed = "".join(o.get("text", "") for o in run.outputs if o.output_type == "stream")
    assert "create_agent called search_shop_docs({'query': " in printed
    assert "and answered: " in printed and "[1]" in printed.split("and answered: ")[1]
