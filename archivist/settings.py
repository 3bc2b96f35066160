"""Settings, read from the environment once; command-line flags override them."""

import base64
import json
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit, urlunsplit

from archivist.tools.errors import ArchivistError

if TYPE_CHECKING:
    from archivist.tools.store import ServerLayout

DEFAULT_OLLAMA_HOST = "http://127.0.0.1:11434"
# Small enough for a laptop CPU, reliable at tool calling, and fluent in English and Chinese.
DEFAULT_CHAT_MODEL = "qwen2.5:3b"
DEFAULT_EMBED_MODEL = "nomic-embed-text"
DEFAULT_STORE = "shop_docs"
SEARCH_MODES = ("hybrid", "dense", "sparse")
# Where stores keep their dense vectors (ARCHIVIST_STORE_LAYOUT; the first is the default).
STORE_LAYOUTS = ("auto", "memory", "disk")
DEFAULT_LANGSMITH_ENDPOINT = "https://api.smith.langchain.com"
# The variables LangSmith reads to decide whether to trace, in the order it reads them: the
# first `*_TRACING_V2` that is set wins, else the first `*_TRACING`; only "true" turns it on.
TRACING_VARIABLES = (
    ("LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2"),
    ("LANGSMITH_TRACING", "LANGCHAIN_TRACING"),
)


@dataclass(frozen=True)
class Tracing:
    """LangSmith tracing, on: every run (questions, passages, answers) is sent to `endpoint`."""

    variable: str
    """The environment variable that turned it on."""
    endpoint: str
    project: str

    def notice(self) -> str:
        """Say where runs go and how to keep them on this machine."""
        return (
            f"Tracing is on ({self.variable}=true): questions, passages and answers are sent "
            f"to LangSmith at {self.endpoint} (project '{self.project}'). "
            f"Unset {self.variable} to keep everything on this machine."
        )


@dataclass(frozen=True)
class Settings:
    """Everything Archivist needs to know about its environment."""

    ollama_host: str = DEFAULT_OLLAMA_HOST
    chat_model: str = DEFAULT_CHAT_MODEL
    embed_model: str = DEFAULT_EMBED_MODEL
    home: Path = field(default_factory=lambda: default_home())
    qdrant_url: str | None = None
    qdrant_api_key: str | None = field(default=None, repr=False)
    qdrant_grpc: bool = False
    """Speak gRPC to the Qdrant server (port 6334) instead of REST."""
    qdrant_timeout: int = 60
    """Seconds to wait for a Qdrant server's answer (creating a collection on a cluster, or a
    large upsert, can take longer than the client's 5-second default)."""
    qdrant_shards: int | None = None
    """Shards of a new store's collection on a server (unset: the server's default)."""
    qdrant_replication_factor: int | None = None
    """Copies of each shard on a cluster (unset: the server's default, 1)."""
    qdrant_write_consistency_factor: int | None = None
    """Replicas that must confirm a write (unset: the server's default, 1)."""
    load_timeout: float | None = None
    """Seconds one file's load may take in an ingest before the file fails and the folder goes
    on (0: no limit; unset: the write path's default, 120)."""
    store_wait: float | None = None
    """Seconds to wait for another process using the embedded store (unset: as long as it
    takes, saying for whom); 0 fails at once unless its holder is idle."""
    store_layout: str = "auto"
    """Where stores keep their dense vectors: `auto` (in memory while a store is searched
    exactly, on disk with an int8 copy in memory once it is large enough to be indexed),
    `memory` (always in memory, searched on the vectors themselves) or `disk` (on disk with
    the int8 copy from the start)."""
    k: int = 5
    search_mode: str = "hybrid"
    min_score: float | None = None
    mmr: float | None = None
    max_steps: int = 6
    timeout: float = 300.0
    num_ctx: int = 8192
    """The largest context window to ask of Ollama (the model's own length if smaller)."""
    grade: bool = False
    """Grade retrieved passages with the chat model, rewriting searches that miss."""
    max_rewrites: int = 2
    """With grading: how many times a search that found nothing relevant is rewritten."""
    retrieve_first: bool = False
    """Search every store before the model answers, even with a model that can call tools."""
    tools: str = "search"
    """The tools each store gives the model: `search`, or `all` (search, list and read)."""
    rerank_model: str | None = None
    """An Ollama model that reranks each search's candidates (None: no reranking)."""
    rerank_candidates: int = 20
    """With reranking: how many of a search's best results are scored."""
    rerank_parallel: int = 4
    """With reranking: scoring requests sent at once (Ollama runs OLLAMA_NUM_PARALLEL)."""
    api_key: str | None = field(default=None, repr=False)
    """The key `archivist serve` asks its clients for (`Authorization: Bearer KEY`)."""
    tracing: Tracing | None = None
    """LangSmith tracing as the environment sets it (LangChain reads it too); None when off."""
    tracing_warning: str | None = None
    """Why a tracing variable that looks like a yes leaves tracing off (LangSmith reads only
    `true`), to be said out loud; None when there is nothing to say."""

    @property
    def store_path(self) -> Path:
        """Where the embedded Qdrant store (Qdrant Edge) lives."""
        return self.home / "edge"

    @property
    def legacy_store_path(self) -> Path:
        """Where release 0.1 kept its embedded store (qdrant-client's local mode)."""
        return self.home / "qdrant"

    @property
    def threads_path(self) -> Path:
        """Where chat conversations are kept (LangGraph's SQLite checkpointer)."""
        return self.home / "threads.sqlite"

    @property
    def log_path(self) -> Path:
        """Where every answered turn is logged."""
        return self.home / "logs.sqlite"

    @property
    def input_history_path(self) -> Path:
        """Where the chat prompt's input history is kept."""
        return self.home / "chat_history"

    @property
    def web_cache(self) -> Path:
        """Where the web pages fetched are kept, with their ETag and Last-Modified, so the
        next crawl asks only for what changed."""
        return self.home / "web"

    @property
    def qdrant_location(self) -> str:
        """Where the stores are, safe to print."""
        return mask_url(self.qdrant_url) if self.qdrant_url else str(self.store_path)

    @property
    def server_layout(self) -> "ServerLayout | None":
        """How new stores are laid out on a Qdrant server; None for the embedded store."""
        from archivist.tools.store import ServerLayout

        if not self.qdrant_url:
            return None
        return ServerLayout(
            self.qdrant_shards,
            self.qdrant_replication_factor,
            self.qdrant_write_consistency_factor,
            vectors=self.store_layout,
        )

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


def split_credentials(url: str) -> tuple[str, dict[str, str]]:
    """Take the user and password out of a URL: return the URL without them, and the HTTP
    Basic `Authorization` header that carries them (no header when there are none)."""
    parts = urlsplit(url)
    if not (parts.username or parts.password):
        return url, {}
    netloc = parts.netloc.rsplit("@", 1)[1]
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    header = "Basic " + base64.b64encode(pair.encode()).decode()
    bare = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return bare, {"Authorization": header}


def load_settings(env: dict[str, str] | None = None) -> Settings:
    """Read the settings from the environment."""
    env = os.environ if env is None else env
    home = env.get("ARCHIVIST_HOME")
    return Settings(
        ollama_host=_address(env, "OLLAMA_HOST", DEFAULT_OLLAMA_HOST, "http://127.0.0.1:11434"),
        chat_model=env.get("ARCHIVIST_CHAT_MODEL") or DEFAULT_CHAT_MODEL,
        embed_model=env.get("ARCHIVIST_EMBED_MODEL") or DEFAULT_EMBED_MODEL,
        home=Path(home).expanduser() if home else default_home(),
        qdrant_url=_address(env, "QDRANT_URL", None, "http://localhost:6333"),
        qdrant_api_key=env.get("QDRANT_API_KEY") or None,
        qdrant_grpc=_flag(env, "ARCHIVIST_QDRANT_GRPC"),
        qdrant_timeout=_count(env, "ARCHIVIST_QDRANT_TIMEOUT") or 60,
        qdrant_shards=_count(env, "ARCHIVIST_QDRANT_SHARDS"),
        qdrant_replication_factor=_count(env, "ARCHIVIST_QDRANT_REPLICATION_FACTOR"),
        qdrant_write_consistency_factor=_count(env, "ARCHIVIST_QDRANT_WRITE_CONSISTENCY_FACTOR"),
        timeout=_number(env, "ARCHIVIST_TIMEOUT", 300.0, 0.1),
        load_timeout=_number(env, "ARCHIVIST_LOAD_TIMEOUT", None, 0),
        num_ctx=_count(env, "ARCHIVIST_NUM_CTX") or 8192,
        k=int(_number(env, "ARCHIVIST_K", 5, 1, 50)),
        search_mode=_choice(env, "ARCHIVIST_SEARCH_MODE", SEARCH_MODES),
        store_layout=_choice(env, "ARCHIVIST_STORE_LAYOUT", STORE_LAYOUTS),
        min_score=_number(env, "ARCHIVIST_MIN_SCORE", None),
        mmr=_number(env, "ARCHIVIST_MMR", None, 0.0, 1.0),
        grade=_flag(env, "ARCHIVIST_GRADE"),
        max_rewrites=int(_number(env, "ARCHIVIST_MAX_REWRITES", 2, 0, 10)),
        retrieve_first=_flag(env, "ARCHIVIST_RETRIEVE_FIRST"),
        tools=_choice(env, "ARCHIVIST_TOOLS", ("search", "all")),
        rerank_model=(env.get("ARCHIVIST_RERANK_MODEL") or "").strip() or None,
        rerank_candidates=int(_number(env, "ARCHIVIST_RERANK_CANDIDATES", 20, 1, 100)),
        rerank_parallel=int(_number(env, "ARCHIVIST_RERANK_PARALLEL", 4, 1, 32)),
        api_key=env.get("ARCHIVIST_API_KEY") or None,
        tracing=_tracing(env),
        tracing_warning=_tracing_warning(env),
    )


def _address(env, name: str, default: str | None, example: str) -> str | None:
    """Read a server's address from the environment, refusing one no client could use (the
    value itself is not repeated: it may hold a password)."""
    raw = (env.get(name) or "").strip() or default
    if raw is None:
        return None
    try:
        address = normalize_host(raw) if name == "OLLAMA_HOST" else raw
        # qdrant-client takes `host:port` without a scheme, as plain http.
        parts = urlsplit(address if "://" in address else f"http://{address}")
        parts.port  # noqa: B018 - reading it checks it: a port that is not 0-65535 raises
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("it needs http:// or https:// and a host name")
    except ValueError as exc:
        raise ArchivistError(
            f"{name} is not an address Archivist can use: {exc}.",
            f"Set {name} to a URL like {example}, or unset it for the default.",
        ) from None
    return address


def _tracing_variable(env) -> str | None:
    """The variable LangSmith reads to decide whether to trace (None when none is set)."""
    for group in TRACING_VARIABLES:
        variable = next((name for name in group if (env.get(name) or "").strip()), None)
        if variable is not None:
            return variable
    return None


def _tracing(env) -> Tracing | None:
    """Read LangSmith's tracing switch the way LangSmith itself reads it: only `true` traces,
    to the write endpoints of LANGSMITH_RUNS_ENDPOINTS when it names some, else to
    LANGSMITH_ENDPOINT (or the default)."""
    variable = _tracing_variable(env)
    if variable is None or env[variable] != "true":
        return None
    runs = _runs_endpoints(_first(env, "LANGSMITH_RUNS_ENDPOINTS", "LANGCHAIN_RUNS_ENDPOINTS"))
    endpoint = _first(env, "LANGSMITH_ENDPOINT", "LANGCHAIN_ENDPOINT")
    endpoints = runs or [endpoint or DEFAULT_LANGSMITH_ENDPOINT]
    project = _first(env, "LANGSMITH_PROJECT", "LANGCHAIN_PROJECT")
    return Tracing(
        variable,
        ", ".join(mask_url(url.strip().strip("'\"").rstrip("/")) for url in endpoints),
        project or "default",
    )


def _runs_endpoints(value: str | None) -> list[str]:
    """The URLs traces are written to under LANGSMITH_RUNS_ENDPOINTS, read as LangSmith reads
    it: a JSON list of objects with string `api_url` and `api_key`, or an object mapping each
    URL to its key; anything else it ignores (and so tracing goes to the endpoint)."""
    try:
        parsed = json.loads(value) if value else None
    except ValueError:
        return []
    if isinstance(parsed, dict):
        return [url for url, key in parsed.items() if isinstance(key, str)]
    if isinstance(parsed, list):
        return [
            item["api_url"]
            for item in parsed
            if isinstance(item, dict)
            and isinstance(item.get("api_url"), str)
            and isinstance(item.get("api_key"), str)
        ]
    return []


def _tracing_warning(env) -> str | None:
    """Say so when a tracing variable reads as a yes to a person but not to LangSmith."""
    variable = _tracing_variable(env)
    if variable is None:
        return None
    value = env[variable].strip()
    if value == "true" or value.lower() not in ("true", "1", "yes", "on"):
        return None
    return (
        f"Tracing is off: LangSmith turns it on only for {variable}=true (lowercase), not "
        f"{variable}={value}. Questions and passages stay on this machine; set "
        f"{variable}=true to trace, or unset it."
    )


def _first(env, *names: str) -> str | None:
    return next((env[name] for name in names if (env.get(name) or "").strip()), None)


def _flag(env, name: str) -> bool:
    value = (env.get(name) or "").strip().lower()
    if value in ("", "0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return True
    raise ArchivistError(f"{name}={env[name]!r} is not a yes or no.", f"Set {name}=1 or {name}=0.")


def _count(env, name: str) -> int | None:
    value = (env.get(name) or "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise ArchivistError(
            f"{name}={env[name]!r} is not a whole number of at least 1.",
            f"Set {name} to a number like 2, or unset it for the default.",
        )
    return int(value)


def _number(
    env, name: str, default: float | None, low: float | None = None, high: float | None = None
) -> float | None:
    """Read a number from the environment, refusing values outside [low, high]."""
    raw = (env.get(name) or "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = None
    if (
        value is None
        or not math.isfinite(value)
        or (low is not None and value < low)
        or (high is not None and value > high)
    ):
        bounds = f" between {low:g} and {high:g}" if low is not None and high is not None else ""
        raise ArchivistError(
            f"{name}={raw} is not a valid number.", f"Set {name} to a number{bounds}, or unset it."
        )
    return value


def _choice(env, name: str, choices: tuple[str, ...]) -> str:
    """Read one of `choices` from the environment; the first is the default."""
    raw = (env.get(name) or choices[0]).strip().lower()
    if raw not in choices:
        raise ArchivistError(
            f"{name}={raw} is not a known value.", f"Use one of: {', '.join(choices)}."
        )
    return raw
