"""Settings, read from the environment once; command-line flags override them."""

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
# Small enough for a laptop CPU, reliable at tool calling, and fluent in English and Chinese.
DEFAULT_CHAT_MODEL = "qwen2.5:3b"
DEFAULT_EMBED_MODEL = "nomic-embed-text"
DEFAULT_STORE = "shop_docs"


@dataclass(frozen=True)
class Settings:
    """Everything Archivist needs to know about its environment."""

    ollama_host: str = DEFAULT_OLLAMA_HOST
    chat_model: str = DEFAULT_CHAT_MODEL
    embed_model: str = DEFAULT_EMBED_MODEL
    home: Path = field(default_factory=lambda: default_home())
    qdrant_url: str | None = None
    qdrant_api_key: str | None = field(default=None, repr=False)
    k: int = 5
    max_steps: int = 6
    timeout: float = 300.0

    @property
    def store_path(self) -> Path:
        """Where the embedded Qdrant store (Qdrant Edge) lives."""
        return self.home / "edge"

    @property
    def legacy_store_path(self) -> Path:
        """Where release 0.1 kept its embedded store (qdrant-client's local mode)."""
        return self.home / "qdrant"

    @property
    def qdrant_location(self) -> str:
        """Where the stores are, safe to print."""
        return mask_url(self.qdrant_url) if self.qdrant_url else str(self.store_path)

    def with_overrides(self, **overrides) -> "Settings":
        """Return a copy with the given (non-None) values replaced."""
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


def default_home() -> Path:
    """Return the data folder: $XDG_DATA_HOME/archivist or ~/.local/share/archivist."""
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "archivist"


def normalize_host(host: str) -> str:
    """Accept what Ollama accepts in OLLAMA_HOST ("0.0.0.0", "host:port", a URL)."""
    host = host.strip().rstrip("/")
    if "://" not in host:
        host = f"http://{host}"
    parts = urlsplit(host)
    netloc = parts.netloc
    hostname = parts.hostname or "127.0.0.1"
    if hostname == "0.0.0.0":
        netloc = netloc.replace("0.0.0.0", "127.0.0.1")
    if parts.port is None:
        netloc = f"{netloc}:{443 if parts.scheme == 'https' else 11434}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def mask_url(url: str) -> str:
    """Hide credentials in a URL, so it can be printed or logged."""
    parts = urlsplit(url)
    if not (parts.username or parts.password):
        return url
    netloc = "***@" + parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read the settings from the environment."""
    env = os.environ if env is None else env
    home = env.get("ARCHIVIST_HOME")
    return Settings(
        ollama_host=normalize_host(env.get("OLLAMA_HOST") or DEFAULT_OLLAMA_HOST),
        chat_model=env.get("ARCHIVIST_CHAT_MODEL") or DEFAULT_CHAT_MODEL,
        embed_model=env.get("ARCHIVIST_EMBED_MODEL") or DEFAULT_EMBED_MODEL,
        home=Path(home).expanduser() if home else default_home(),
        qdrant_url=env.get("QDRANT_URL") or None,
        qdrant_api_key=env.get("QDRANT_API_KEY") or None,
        timeout=float(env.get("ARCHIVIST_TIMEOUT") or 300),
    )
