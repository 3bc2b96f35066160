"""Fixtures: a fake Ollama on a loopback port, a temporary home, stores and the CLI."""

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fake_ollama import FakeOllama

from archivist.app import Archivist
from archivist.settings import Settings, mask_url

ROOT = Path(__file__).resolve().parents[1]
SHOP = ROOT / "examples" / "shop"


def pytest_report_header(config: pytest.Config) -> str:
    """Say whether the congruence suite also runs against a Qdrant server."""
    url = os.environ.get("QDRANT_URL")
    if url:
        return f"Qdrant server leg: on, against {mask_url(url)} (tests/test_congruence.py)"
    return "Qdrant server leg: skipped, QDRANT_URL is not set (tests/test_congruence.py)"


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point Archivist's data folder at a temp dir: tests never touch a real home."""
    path = tmp_path / "home"
    monkeypatch.setenv("ARCHIVIST_HOME", str(path))
    for name in ("QDRANT_URL", "QDRANT_API_KEY", "ARCHIVIST_CHAT_MODEL", "ARCHIVIST_EMBED_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return path


@pytest.fixture
def ollama() -> Iterator[FakeOllama]:
    """A fake Ollama speaking the real HTTP API."""
    with FakeOllama() as fake:
        yield fake


@pytest.fixture
def settings(ollama: FakeOllama, home: Path) -> Settings:
    return Settings(ollama_host=ollama.url, home=home)


@pytest.fixture
def archivist(settings: Settings) -> Iterator[Archivist]:
    app = Archivist(settings)
    yield app
    app.close()


@pytest.fixture
def shop_store(archivist: Archivist) -> str:
    """The sample knowledge base, ingested into `shop_docs`."""
    archivist.ingest([str(SHOP)], "shop_docs", description="policies of an outdoor shop")
    return "shop_docs"


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
) -> subprocess.CompletedProcess:
    """Run `python -m archivist ARGS` as a user would, against the given Ollama and home."""
    env = {**os.environ, "OLLAMA_HOST": ollama_url, "ARCHIVIST_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "archivist", *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        cwd=cwd,
    )


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
