"""Fixtures: a fake Ollama on a loopback port, a temporary home, stores and the CLI."""

import functools
import os
import shutil
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer.main
from fake_models import FakeModels, install
from fake_ollama import FakeOllama
from typer.testing import CliRunner

from archivist.app import Archivist
from archivist.cli import main as cli_main
from archivist.settings import TRACING_VARIABLES, Settings, mask_url

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "shop"
SHOP_DESCRIPTION = "policies of an outdoor shop"


def pytest_configure(config: pytest.Config) -> None:
    # A suite started in the background of a script (`./run test &`, nohup, some CI runners)
    # inherits Ctrl-C ignored, and so would every chat and watch the tests start, which then
    # never hear the Ctrl-C the tests press. They get what a terminal gives a program: Python's
    # own handling (a handler is reset to the default in a started program; "ignored" is not).
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line(
        "markers",
        "loading_child: an in-process ingest loads its files in the loading child by default, "
        "as the app does (see `loads_in_this_process`)",
    )
    config.addinivalue_line(
        "markers",
        "embed_ahead: an in-process ingest into a new store embeds its first files ahead of "
        "its graph, as a first ingest in a process does (see `graph_imports_loaded`)",
    )


def pytest_report_header(config: pytest.Config) -> str:
    """Say whether the congruence suite also runs against a Qdrant server."""
    url = os.environ.get("QDRANT_URL")
    if url:
        return f"Qdrant server leg: on, against {mask_url(url)} (tests/test_congruence.py)"
    return "Qdrant server leg: skipped, QDRANT_URL is not set (tests/test_congruence.py)"


# The longest files (their tests' seconds added up, from `--durations=0`), longest first:
# under `--dist loadfile` each worker takes the next file as it finishes one, so the short
# files then fill in around the long ones instead of one long file trailing at the end.
SLOW_FILES = (
    "test_notebooks.py",
    "test_benchmark.py",
    "test_reliability_ollama.py",
    "test_ocr.py",
    "test_concurrency.py",
    "test_packaging.py",
    "test_cli_conventions.py",
    "test_reliability_processes.py",
    "test_load_budget.py",
    "test_web.py",
    "test_sync.py",
    "test_small_models.py",
    "test_chat_terminal.py",
    "test_edge.py",
    "test_chat_interrupts.py",
    "test_worker.py",
    "test_release_store.py",
    "test_mcp.py",
    "test_eval.py",
    "test_eval_embedders.py",
    "test_congruence.py",
    "test_store.py",
    "test_chat_start.py",
    "test_ingest_recovery.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slowest files first (a stable sort: each file keeps its own order)."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return SLOW_FILES.index(name) if name in SLOW_FILES else len(SLOW_FILES)

    items.sort(key=rank)


@pytest.fixture(autouse=True, scope="session")
def one_tls_context() -> Iterator[None]:
    """Let every HTTP client in the test process share one default TLS context.

    LangChain's Ollama models each make an async httpx client, which loads the certificate
    store again (0.1-0.2 s of CPU each, hundreds of times in a run) though no test speaks
    TLS. A context is safe to share, as Archivist's own clients do
    (`archivist.ollama.clients._tls_context`).
    """
    from httpx._transports import default

    made = default.create_ssl_context

    @functools.cache
    def shared(cert_file: str | None, cert_dir: str | None):
        return made()

    def create_ssl_context(verify=True, cert=None, trust_env=True):
        if verify is True and cert is None and trust_env:
            return shared(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))
        return made(verify=verify, cert=cert, trust_env=trust_env)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(default, "create_ssl_context", create_ssl_context)
        yield


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point Archivist's data folder at a temp dir: tests never touch a real home."""
    path = tmp_path / "home"
    monkeypatch.setenv("ARCHIVIST_HOME", str(path))
    for name in ("QDRANT_URL", "QDRANT_API_KEY", "ARCHIVIST_CHAT_MODEL", "ARCHIVIST_EMBED_MODEL"):
        monkeypatch.delenv(name, raising=False)
    # Tests never send traces anywhere, whatever the developer's shell has set.
    for group in TRACING_VARIABLES:
        for name in group:
            monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture(autouse=True)
def loads_in_this_process(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingests in the test process load their files in it, without the per-file loading child
    (`archivist.ingest.loading`): starting that child (Python and the loaders' imports) on every
    ingest of a run took a large share of the suite's CPU. The default budget becomes "none",
    as `ARCHIVIST_LOAD_TIMEOUT=0` makes it; a budget set explicitly (`load_timeout=`, the
    setting, `--load-timeout`) still loads in the child, and so does every ingest run as a
    process. Tests of the budget itself, or that count the child, mark themselves
    `loading_child` and get the real default."""
    if request.node.get_closest_marker("loading_child") is None:
        from archivist.ingest import loading

        monkeypatch.setattr(loading, "DEFAULT_SECONDS", 0.0)


@pytest.fixture(autouse=True)
def graph_imports_loaded(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ingests in the test process do not embed ahead of their graph
    (`archivist.ingest.ahead`): whether LangGraph is imported yet depends on which tests ran
    before in the same worker, and an ingest's requests should not. Tests of it mark
    themselves `embed_ahead`; an ingest run as a process embeds ahead as a user's does."""
    if request.node.get_closest_marker("embed_ahead") is None:
        from archivist.ingest import ahead

        monkeypatch.setattr(ahead, "graph_imported", lambda: True)


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    """A fake Ollama speaking the real HTTP API."""
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
def fake_models(monkeypatch: pytest.MonkeyPatch) -> FakeModels:
    """The fake Ollama's models in this process, installed at the Ollama seam: chat models,
    embedders and `show` answers as the HTTP fake gives them, with no server and no HTTP.

    For tests of what Archivist does with the models' answers (the agent, ingest, search, the
    CLI in this process); the `ollama` fixture stays for the wire itself (streaming, status
    codes, retries, a server that dies) and for the tests that start processes.
    """
    return install(FakeModels(), monkeypatch)


@pytest.fixture
def settings(ollama: FakeOllama, home: Path) -> Settings:
    return Settings(ollama_host=ollama.url, home=home)


@pytest.fixture
def archivist(settings: Settings) -> Iterator[Archivist]:
    app = Archivist(settings)
    yield app
    app.close()


@pytest.fixture(scope="session")
def sample_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home holding the sample knowledge base in `shop_docs`, ingested once per session: the
    fake Ollama's embeddings are deterministic, so a copy equals a fresh ingest
    (tests/test_sample_home.py checks that)."""
    path = tmp_path_factory.mktemp("sample") / "home"
    with FakeOllama() as fake:
        app = Archivist(Settings(ollama_host=fake.url, home=path))
        try:
            app.ingest([str(SHOP)], "shop_docs", description=SHOP_DESCRIPTION)
        finally:
            app.close()
    return path


@pytest.fixture
def shop_store(archivist: Archivist, sample_home: Path, home: Path) -> str:
    """The sample knowledge base in `shop_docs`: a copy of the session's ingested home."""
    archivist.close()  # the copy goes in before the store is first opened
    copy_home(sample_home, home)
    return "shop_docs"


def copy_home(source: Path, target: Path) -> Path:
    """Copy a home (its stores, threads, logs) to `target`, holes and all.

    A store's files are mostly holes (Qdrant Edge makes its WAL segments and page files 32 MB
    long before anything is in them): a plain copy writes them out as ~190 MB of zeros a store,
    which cost every test that copied a prepared home a quarter of a second and the disk its
    write. The copy reads the same bytes; holes stay holes, and so do blocks of zeros written
    out in full (a store extracted from an archive)."""
    shutil.copytree(source, target, copy_function=_copy_sparse, dirs_exist_ok=True)
    return target


_ZEROS = bytes(2**16)


def _copy_sparse(source: str, target: str) -> None:
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        offset = 0
        while offset < size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: nothing but a hole up to the end
                break
            end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            src.seek(start)
            dst.seek(start)
            left = end - start
            while left:
                chunk = src.read(min(left, len(_ZEROS)))
                if chunk == _ZEROS[: len(chunk)]:
                    dst.seek(len(chunk), os.SEEK_CUR)
                else:
                    dst.write(chunk)
                left -= len(chunk)
            offset = end
        dst.truncate(size)
    shutil.copystat(source, target)


def write_files(root: Path, files: dict[str, str | bytes]) -> Path:
    """Create files under `root` from a {relative path: content} mapping."""
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return root


def run_cli(
    *args: str,
    ollama_url: str,
    home: Path,
    stdin: str | None = None,
    timeout: float = 120,
    cwd: Path = ROOT,
    process: bool = False,
) -> subprocess.CompletedProcess:
    """Run `archivist ARGS` against the given Ollama and home: in this process through the CLI's
    entry point, or with `process=True` as `python -m archivist` where the process boundary is the
    point (import paths, signals, locks between processes)."""
    env = {"OLLAMA_HOST": ollama_url, "ARCHIVIST_HOME": str(home)}
    if process:
        return subprocess.run(
            [sys.executable, "-m", "archivist", *args],
            input=stdin,
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=timeout,
            cwd=cwd,
        )
    return _run_in_process(list(args), env, stdin, cwd)


def _run_in_process(
    args: list[str], env: dict[str, str], stdin: str | None, cwd: Path
) -> subprocess.CompletedProcess:
    # The real entry point, `main()`, so settings loading and error rendering are the user's;
    # Typer's runner swaps stdin/stdout/stderr and the environment for the run and restores them.
    status = 0
    before = os.getcwd()
    with (
        CliRunner().isolation(input=stdin, env=env) as (out, err, _),
        pytest.MonkeyPatch.context() as patch,
        warnings.catch_warnings(),
    ):
        patch.setattr(sys, "argv", ["archivist", *args])
        patch.setattr(typer.main, "get_command", _command)
        _warn_as_python_does()
        os.chdir(cwd)
        try:
            cli_main()
        except SystemExit as stop:
            status = stop.code or 0
            if isinstance(status, str):  # sys.exit("message"), as Python prints it
                sys.stderr.write(status + "\n")
                status = 1
        except BaseException:  # noqa: BLE001 - a process would die printing it, exit status 1
            traceback.print_exc()
            status = 1
        finally:
            os.chdir(before)
            sys.stdout.flush()
            sys.stderr.flush()
        stdout = out.getvalue().decode()
        stderr = err.getvalue().decode("utf-8", "backslashreplace")
    return subprocess.CompletedProcess(["archivist", *args], status, stdout, stderr)


_get_command = typer.main.get_command


def _command(app: typer.Typer):
    """The Click command that `main()` builds from the Typer app, built once for the test
    process: building it reads every command's signature and options (~40 ms), which a process
    does once and the in-process runs would do on each of their hundreds of runs. Click commands
    are made to be invoked again (as Click's own CliRunner does). The build reads Typer's own
    variables (the completion options'), so a run that sets one gets a command of its own."""
    typers = tuple(sorted((k, v) for k, v in os.environ.items() if "TYPER" in k))
    return _built_command(app, typers)


@functools.cache
def _built_command(app: typer.Typer, typers: tuple[tuple[str, str], ...]):
    return _get_command(app)


def _warn_as_python_does() -> None:
    # Warnings go to the run's stderr under Python's default filters, as in a process, rather
    # than into pytest's record: a test of what a user sees on stderr sees them too.
    warnings.resetwarnings()
    warnings.simplefilter("default")
    for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
        warnings.simplefilter("ignore", category)

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    warnings.showwarning = show  # the caller's catch_warnings() restores it


@pytest.fixture
def store(archivist: Archivist, shop_store: str) -> str:
    """The sample store, released so CLI and chat processes can open it."""
    archivist.close()
    return shop_store


def cli(*args: str, ollama, home: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run the CLI against the fake Ollama and require it to succeed."""
    done = run_cli(*args, ollama_url=ollama.url, home=home, stdin=stdin)
    assert done.returncode == 0, done.stderr
    return done


def stored_sparse_vectors(store, source: str | None = None) -> dict[str, tuple[list, list]]:
    """The sparse vector stored with each chunk (of `source`, else all), by the text it was
    made from: the chunk's text after its heading line (`indexed_text`)."""
    from qdrant_client import models

    from archivist.tools.engine import scroll_pages
    from archivist.tools.store import SPARSE, indexed_text

    selector = None
    if source is not None:
        match = models.MatchValue(value=source)
        selector = models.Filter(must=[models.FieldCondition(key="source", match=match)])
    return {
        indexed_text(point.payload["text"], point.payload.get("metadata") or {}): (
            point.vector[SPARSE].indices,
            point.vector[SPARSE].values,
        )
        for points in scroll_pages(
            store.client, store.name, 256, selector, ["text", "metadata"], True
        )
        for point in points
    }
