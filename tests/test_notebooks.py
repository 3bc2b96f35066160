"""The notebooks: stored clean, run top to bottom against the fake Ollama, and read well."""

import re
import tempfile
from dataclasses import dataclass
from functools import cache
from io import StringIO
from pathlib import Path

import nbformat
import pandas as pd
import pytest
from conftest import ROOT
from fake_ollama import DEFAULT_MODELS, FakeOllama, ModelSpec
from nbclient import NotebookClient

from archivist.tools import store as store_module
from archivist.tools.errors import ArchivistError
from archivist.tools.search import SearchRequest

NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@dataclass
class Run:
    """A notebook executed against a fresh fake Ollama and a fresh ARCHIVIST_HOME."""

    notebook: nbformat.NotebookNode
    embedded: int
    chat_models: set[str]
    home_used: bool
    temp_left: list[str]
    """What the kernel left in its temporary directory (TMPDIR)."""

    @property
    def outputs(self) -> list[dict]:
        return [output for cell in self.notebook.cells for output in cell.get("outputs", [])]

    def cell(self, code: str) -> nbformat.NotebookNode:
        """The first code cell whose source holds `code`."""
        return next(c for c in self.notebook.cells if c.cell_type == "code" and code in c.source)


def execute(
    notebook: nbformat.NotebookNode,
    models: list[ModelSpec] | None = None,
    allow_errors: bool = False,
) -> Run:
    """Execute a notebook against a fresh fake Ollama serving `models` (default: all of its
    models), a fresh ARCHIVIST_HOME and a fresh TMPDIR."""
    with (
        FakeOllama(models) as fake,
        tempfile.TemporaryDirectory() as home,
        tempfile.TemporaryDirectory() as temp,
        pytest.MonkeyPatch.context() as env,
    ):
        # The kernel inherits this environment and finds both through the project's settings.
        env.setenv("OLLAMA_HOST", fake.url)
        env.setenv("ARCHIVIST_HOME", home)
        env.setenv("TMPDIR", temp)
        env.delenv("MPLBACKEND", raising=False)
        client = NotebookClient(
            notebook,
            timeout=120,
            kernel_name="python3",
            allow_errors=allow_errors,
            resources={"metadata": {"path": str(ROOT / "notebooks")}},
        )
        client.execute()  # raises CellExecutionError, naming the cell, when a cell fails
        return Run(
            notebook,
            embedded=len(fake.requests_to("/api/embed")),
            chat_models={request["model"] for request in fake.requests_to("/api/chat")},
            home_used=(Path(home) / "edge").is_dir(),
            temp_left=sorted(path.name for path in Path(temp).iterdir()),
        )


@cache
def run_notebook(name: str) -> Run:
    """Execute a notebook the way CI does; each notebook runs once per test session."""
    return execute(nbformat.read(ROOT / "notebooks" / name, as_version=4))


def shows_table(output: dict) -> bool:
    return "<table" in output.get("data", {}).get("text/html", "")


def tables(cell: nbformat.NotebookNode) -> list[pd.DataFrame]:
    """The HTML tables a cell showed, read back as pandas reads a page, values as text (a
    number shown as `15.00` comes back as `15.0`, `6,797` as it is)."""
    html = [o["data"]["text/html"] for o in cell.outputs if shows_table(o)]
    pages = [pd.read_html(StringIO(page), index_col=0, thousands=None) for page in html]
    return [table.astype(str) for page in pages for table in page]


def shown_values(run: Run) -> str:
    """What a run's cells showed as their values (tables, series), without what they printed."""
    kinds = ("text/plain", "text/html")
    return "\n".join(o.get("data", {}).get(kind, "") for o in run.outputs for kind in kinds)


def printed(cell: nbformat.NotebookNode) -> str:
    """What a cell printed."""
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def markdown_of(path: Path) -> str:
    notebook = nbformat.read(path, as_version=4)
    return "\n".join(cell.source for cell in notebook.cells if cell.cell_type == "markdown")


ANSI = re.compile(r"\x1b\[[0-9;]*m")
WHOLE_NUMBER = re.compile(r"^\d{1,3}(,\d{3})*$")


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
    # Cells added on two branches can share an id; nbformat would then rename one on each read.
    assert len({cell.id for cell in notebook.cells}) == len(notebook.cells)


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
    assert "retrieval_hit@5" in html and "qwen2.5:0.5b (agent)" in html
    # The last cell: the store as a tool and a retriever in LangChain's own create_agent.
    printed = "".join(o.get("text", "") for o in run.outputs if o.output_type == "stream")
    assert "create_agent called search_shop_docs({'query': " in printed
    assert "and answered: " in printed and "[1]" in printed.split("and answered: ")[1]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda path: path.stem)
def test_tables_show_no_nan_no_dtype_and_no_raw_dicts(path: Path) -> None:
    shown = shown_values(run_notebook(path.name))

    assert "NaN" not in shown and "<NA>" not in shown
    assert "dtype:" not in shown
    assert "{'" not in shown, "a dict printed inside a table"


def test_counts_are_whole_numbers() -> None:
    ingest = run_notebook("01_ingest_and_inspect.ipynb")
    (summary,) = tables(ingest.cell("summary = {"))
    for row in ("files", "unchanged files", "chunks embedded", "chunks in the store"):
        assert WHOLE_NUMBER.match(summary.loc[row, "value"]), summary.loc[row, "value"]
    (per_source,) = tables(ingest.cell("per_source ="))
    assert per_source.map(WHOLE_NUMBER.match).all().all(), per_source

    agent = run_notebook("03_agent_and_evals.ipynb")
    (metrics,) = tables(agent.cell("metrics = pd.DataFrame("))
    counts = ["input_tokens", "output_tokens", "model_calls", "errors", "runs"]
    assert metrics.loc[counts].map(WHOLE_NUMBER.match).all().all(), metrics.loc[counts]
    assert metrics.loc["runs"].tolist() == ["8", "8"]


def test_every_chunk_is_listed() -> None:
    run = run_notebook("01_ingest_and_inspect.ipynb")
    (chunks,) = tables(run.cell("chunks = pd.DataFrame("))
    (stores,) = tables(run.cell("archivist.stores()"))

    assert len(chunks) == int(stores.iloc[0]["chunks"]) > 50
    assert chunks["chinese"].tolist().count("True") == (chunks["source"] == "配送说明.md").sum() > 0


def test_questions_and_chunk_sizes_stay_in_the_order_defined() -> None:
    run = run_notebook("02_retrieval_lab.ipynb")
    (side_by_side,) = tables(run.cell("side_by_side ="))
    asked = list(dict.fromkeys(side_by_side.index.dropna()))
    source = run.cell("QUESTIONS = [").source
    assert asked == re.findall(r'^    "(.+)",$', source, re.M)
    assert asked[0] == "How long do I have to get my money back?"

    (by_size,) = tables(run.cell("by_size = pd.DataFrame("))
    sizes = list(dict.fromkeys(by_size.index.dropna()))
    # The default size is compared with the others, in order of size, and its store is the
    # one ingested at the start, left as it was.
    assert sizes == ["300", "1,000 (default)", "1,500"]
    (held,) = re.findall(r"^(\d+) chunks in shop_docs$", printed(run.cell("MODES = [")), re.M)
    assert f"shop_docs: {held} chunks of up to 1,000 characters" in printed(
        run.cell("CHUNK_SIZES =")
    )


def test_the_stated_fusion_is_the_stores_default() -> None:
    default = SearchRequest().fusion
    text = markdown_of(ROOT / "notebooks" / "02_retrieval_lab.ipynb")

    named = set(re.findall(r"`(fuse_\w+)`", text))
    assert named == {f"fuse_{default}"}
    assert callable(getattr(store_module, f"fuse_{default}"))
    # The words that describe each fusion: only the default's may appear.
    words = {"zscore": "z-score", "rrf": "reciprocal rank"}
    assert words[default] in text
    assert not [word for name, word in words.items() if name != default and word in text]


def test_no_temporary_folder_remains_and_progress_is_shown() -> None:
    run = run_notebook("03_agent_and_evals.ipynb")

    assert run.temp_left == []
    html = "".join(
        o.get("data", {}).get("text/html", "") for o in run.cell("NotebookProgress(").outputs
    )
    assert '<progress value="16" max="16"' in html and "16/16 runs" in html
    assert "16 runs: roughly 1 min 20 s to 8 min with real models on a CPU" in printed(
        run.cell("NotebookProgress(")
    )


def test_the_agent_graph_is_also_a_static_figure() -> None:
    run = run_notebook("03_agent_and_evals.ipynb")
    outputs = run.cell("draw_graph(").outputs

    assert [o for o in outputs if "image/png" in o.get("data", {})]


def test_a_model_not_pulled_shows_the_fix_without_a_traceback() -> None:
    notebook = nbformat.read(ROOT / "notebooks" / "03_agent_and_evals.ipynb", as_version=4)
    # The notebook as far as its eval, the cell that asks for the missing model: the cells
    # after it are run (and checked) by the tests above.
    last = next(i for i, cell in enumerate(notebook.cells) if "evaluate(" in cell.source)
    notebook.cells = notebook.cells[: last + 1]
    served = [spec for spec in DEFAULT_MODELS if spec.name != "qwen2.5:0.5b"]

    run = execute(notebook, served, allow_errors=True)

    error = next(o for o in run.outputs if o.output_type == "error")
    shown = ANSI.sub("", "\n".join(error.traceback))
    assert error.ename == "ModelMissing"  # an ArchivistError, named for what is wrong
    assert "The model 'qwen2.5:0.5b' is not available in Ollama" in shown
    assert "Pull it with `ollama pull qwen2.5:0.5b`" in shown
    assert "Traceback" not in shown and 'File "' not in shown and "archivist/" not in shown
    assert run.cell("evaluate(").outputs[-1] is error  # the failing cell is the eval


def test_an_archivist_error_renders_as_its_message_and_fix() -> None:
    error = ArchivistError("The store is locked.", "Close it in the other notebook.\nOr wait.")

    lines = [ANSI.sub("", line) for line in error._render_traceback_()]

    assert lines == [
        "ArchivistError: The store is locked.",
        "Close it in the other notebook.",
        "Or wait.",
    ]


def test_the_agent_notebook_generates_a_set_and_compares_two_embedders() -> None:
    run = run_notebook("03_agent_and_evals.ipynb")

    html = "".join(o.get("data", {}).get("text/html", "") for o in run.outputs)
    assert "unanswerable" in html and "no_tool" in html  # the generated set's table
    assert "shop_docs__all_minilm" in html  # all-minilm got its own store
    text = "".join("".join(o.get("text", "")) for o in run.outputs)
    assert "Dropped" in text
