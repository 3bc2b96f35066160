"""The model factory: the one module that talks to Ollama through its client libraries."""

import errno
import json
import math
import re
import sqlite3
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from functools import cache
from html import escape
from typing import Any, TypeVar

import httpx
import ollama
import orjson
import pydantic
from langchain_core.callbacks import dispatch_custom_event
from langchain_ollama import ChatOllama, OllamaEmbeddings

from archivist import prefetch
from archivist.agent import prompts
from archivist.agent.records import ModelInfo
from archivist.agent.rerank import Scorer
from archivist.deadline import DeadlineTransport
from archivist.light_ollama import context_of
from archivist.settings import Settings, mask_url, split_credentials
from archivist.tools.embedding import PrefixedEmbeddings
from archivist.tools.errors import ArchivistError, ModelMissing, OllamaUnreachable
from archivist.tools.progress import CHANNEL, Retried

T = TypeVar("T")


@cache
def _tls_context() -> ssl.SSLContext:
    # Each HTTP client would load the certificate store again (~0.1 s of CPU each, three
    # per ingest); httpx's own default context is made once and shared.
    return httpx.create_ssl_context()


def _client_kwargs(settings: Settings, timeout: float | None = None) -> dict[str, Any]:
    """What every HTTP client to Ollama is built with: the credentials of OLLAMA_HOST (sent
    as a header on every request, whichever library makes it) and a transport that ends each
    request within ARCHIVIST_TIMEOUT from its first byte to its last (archivist.deadline)."""
    seconds = settings.timeout if timeout is None else timeout
    _, credentials = split_credentials(settings.ollama_host)
    return {
        "timeout": seconds,
        "headers": credentials,
        "transport": DeadlineTransport(seconds, verify=_tls_context()),
    }


def _langchain_kwargs(settings: Settings) -> dict[str, Any]:
    """The address and clients of a LangChain Ollama model, as `_client_kwargs` makes them.

    LangChain hands `client_kwargs` to its async client too, which cannot use a synchronous
    transport: the transport goes to the synchronous client alone (the one Archivist uses),
    and the async one gets the shared TLS context (else it loads the certificate store again,
    ~0.1 s of CPU for every model built).
    """
    kwargs = _client_kwargs(settings)
    transport = kwargs.pop("transport")
    return {
        "base_url": split_credentials(settings.ollama_host)[0],
        "client_kwargs": kwargs,
        "sync_client_kwargs": {"transport": transport},
        "async_client_kwargs": {"verify": _tls_context()},
    }


def client(settings: Settings) -> ollama.Client:
    """Return an Ollama client for the configured host (its credentials sent as a header,
    each request bounded by the timeout: `_client_kwargs`)."""
    host = split_credentials(settings.ollama_host)[0]
    return ollama.Client(host=host, **_client_kwargs(settings))


class UnreadableAnswer(Exception):
    """What answered at Ollama's address sent something that is not Ollama's API: not JSON,
    an empty body, numbers that are not numbers, fields of the wrong kind."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


@contextmanager
def _reading(path: str, misfits: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn the client's failures to read an answer into UnreadableAnswer: JSON it cannot
    decode, fields its models refuse, and `misfits` (the failures of reading a value of the
    wrong kind where the caller knows it can only come from the answer)."""
    try:
        yield
    except json.JSONDecodeError as exc:  # orjson's error is one too
        raise UnreadableAnswer(path, _not_json(exc)) from None
    except (pydantic.ValidationError, *misfits):
        raise UnreadableAnswer(path, "not what Ollama answers") from None


def _not_json(exc: json.JSONDecodeError) -> str:
    return "an empty answer" if not exc.doc.strip() else f"not JSON ({exc.msg})"


# A request that failed in a way that may pass (`transient`: a 5xx or 429 before the answer's
# first token, a connection cut) is tried this many times, waiting CHAT_BACKOFF seconds, then
# twice as long each time: as ingest's requests.
CHAT_ATTEMPTS = 4
CHAT_BACKOFF = 1.0


def transient(exc: BaseException) -> bool:
    """Whether a request that failed so may pass if sent again: Ollama busy or restarting its
    runner (a 5xx or 429), or the connection cut under it. Not a refused connection (Ollama
    is not running) nor a timeout (the wait is already as long as the user allows)."""
    if isinstance(exc, ollama.ResponseError):
        return exc.status_code >= 500 or exc.status_code == 429
    return isinstance(exc, httpx.ReadError | httpx.WriteError | httpx.RemoteProtocolError)


def _why(exc: BaseException) -> str:
    if isinstance(exc, ollama.ResponseError):
        return f"Ollama answered with an error ({exc.error})"
    return f"The connection to Ollama was cut ({exc or type(exc).__name__})"


def with_retries(send: Callable[[], T], attempts: int | None = None) -> T:
    """Send a request, sending it again while it fails in a way that may pass (`transient`),
    up to `attempts` times in all, waiting CHAT_BACKOFF seconds, then twice as long each
    time; each retry is announced (a `Retried` event)."""
    attempts = attempts or CHAT_ATTEMPTS
    attempt = 0
    while True:
        attempt += 1
        try:
            return send()
        except Exception as exc:
            if not transient(exc) or attempt >= attempts:
                raise
            _wait(exc, attempt, attempts)


def _wait(exc: BaseException, attempt: int, attempts: int) -> None:
    wait = CHAT_BACKOFF * 2 ** (attempt - 1)
    _announce(Retried(_why(exc), attempt, wait, "chat", attempts - 1))
    time.sleep(wait)


class CompleteChatOllama(ChatOllama):
    """ChatOllama that retries a request a busy Ollama refused (or whose connection was cut),
    and refuses an answer whose stream ended before Ollama's closing line.

    A retry is announced (a `Retried` event, which the chat and `ask` show) and made only while no
    token has been shown: a half-streamed answer is never started again. When Ollama dies
    mid-answer the stream just stops; without the check the half-written answer would pass
    for a whole one.
    """

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        attempt = 0
        while True:
            attempt += 1
            watched = _Streamed(run_manager)
            try:
                with _reading("/api/chat"):
                    result = super()._generate(messages, stop, watched, **kwargs)
            except ValueError as exc:
                if "No data received" not in str(exc):
                    raise
                raise UnreadableAnswer("/api/chat", "an empty answer") from None
            except Exception as exc:
                if watched.tokens or not transient(exc) or attempt == CHAT_ATTEMPTS:
                    raise
                _wait(exc, attempt, CHAT_ATTEMPTS)
                continue
            if not (result.generations[0].generation_info or {}).get("done"):
                raise httpx.RemoteProtocolError("Ollama stopped before the answer was complete.")
            return result


class _Streamed:
    """A model run's callback manager that notes whether a token was passed on."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokens = False

    def on_llm_new_token(self, *args: Any, **kwargs: Any) -> None:
        self.tokens = True
        if self.inner is not None:
            self.inner.on_llm_new_token(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _announce(event: Retried) -> None:
    """Tell the turn's listeners (the chat's view, `ask`'s stderr) about a retry."""
    # Outside a graph run there is no listener to tell, and dispatching raises.
    with suppress(RuntimeError):
        dispatch_custom_event(CHANNEL, event)


def chat_model(settings: Settings, model: str | None = None, **options) -> ChatOllama:
    """Build the chat model (no request is made until it is used)."""
    return CompleteChatOllama(
        model=model or settings.chat_model, **_langchain_kwargs(settings), **options
    )


def structured(
    settings: Settings, model: str, schema: dict, seed: int | None = None
) -> Callable[[str, str], object]:
    """Build a function that sends (system, request) with `schema` as Ollama's `format` and
    returns the reply's JSON (raising ValueError when the reply is not JSON)."""
    chat = chat_model(settings, model, temperature=0, seed=seed, format=schema)

    def ask(system: str, request: str) -> object:
        reply = chat.invoke([("system", system), ("human", request)])
        return orjson.loads(reply.content if isinstance(reply.content, str) else "")

    return ask


# Ollama's context window for a model whose Modelfile sets no num_ctx.


class StrictOllamaEmbeddings(OllamaEmbeddings):
    """OllamaEmbeddings that sends `truncate: false`: Ollama then refuses an input longer
    than the model's context instead of silently embedding only its beginning.

    The request goes through the ollama client's own connection, headers and error mapping,
    but its body is written and the answer read with orjson: the client's pydantic models
    check each of an answer's floats one by one, which costs more CPU than a fast embedder
    spends computing them (see the Performance section of the README). What is checked
    instead, in C: one vector per input, all numbers, all finite, all of one length — the
    model's declared length once `show` has read it. A query is sent again while it fails in
    a way that may pass (`with_retries`); documents are retried by the ingest
    (archivist.ingest.embedder), which reports each retry as progress."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, object] = {"model": self.model, "input": texts, "truncate": False}
        options = {k: v for k, v in (self._default_params or {}).items() if v is not None}
        if options:
            body["options"] = options
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        if self.dimensions is not None:
            body["dimensions"] = self.dimensions
        response = self._client._request_raw("POST", "/api/embed", content=orjson.dumps(body))
        with _reading("/api/embed", (AttributeError,)):
            vectors = orjson.loads(response.content).get("embeddings")
        if not isinstance(vectors, list) or len(vectors) != len(texts):
            raise UnreadableAnswer(
                "/api/embed", f"{len(vectors or [])} embeddings for {len(texts)} inputs"
            )
        self.check_vectors(vectors)
        return vectors

    def check_vectors(self, vectors: list) -> None:
        """Refuse vectors that are not lists of finite numbers of one (the declared) length."""
        try:
            # sum() runs in C and fails on anything but numbers; NaN and infinity stay so.
            finite = vectors == [] or math.isfinite(sum(map(sum, vectors)))
        except TypeError:
            finite = False
        if not finite:
            raise UnreadableAnswer("/api/embed", "vectors that are not all finite numbers")
        lengths = set(map(len, vectors))
        declared = None if self.dimensions else _DECLARED.get((self.base_url, _bare(self.model)))
        if len(lengths) > 1 or (declared and lengths and lengths != {declared}):
            sizes = ", ".join(map(str, sorted(lengths)))
            said = f", but Ollama lists it as {declared}-dimensional" if declared else ""
            raise ArchivistError(
                f"The embedding model '{self.model}' answered vectors of {sizes} dimensions"
                f"{said}: what runs under that name is not the model it declares.",
                f"Pull it again (`ollama pull {self.model}`), or check the model Ollama at "
                f"{mask_url(self.base_url or '')} serves under that name; nothing was stored.",
            )

    def embed_query(self, text: str) -> list[float]:
        return with_retries(lambda: self.embed_documents([text])[0])


_DECLARED: dict[tuple[str, str], int] = {}
"""Each embedding model's vector length as /api/show declared it, by (address, model)."""


def _bare(model: str) -> str:
    return model.removesuffix(":latest")


def _declare(settings: Settings, model: str, capabilities: list[str], info: dict) -> int | None:
    """Note an embedding model's declared vector length (for StrictOllamaEmbeddings)."""
    dimension = next((v for k, v in info.items() if k.endswith(".embedding_length")), None)
    if isinstance(dimension, int) and "embedding" in capabilities:
        _DECLARED[split_credentials(settings.ollama_host)[0], _bare(model)] = dimension
    return dimension


def embeddings(
    settings: Settings, model: str | None = None, prefixes: tuple[str, str] | None = None
) -> PrefixedEmbeddings:
    """Build the embedding model, with the (document, query) task prefixes given, else those
    it was trained with."""
    name = model or settings.embed_model
    inner = StrictOllamaEmbeddings(model=name, **_langchain_kwargs(settings))
    if prefixes is None:
        return PrefixedEmbeddings.for_model(inner, name)
    return PrefixedEmbeddings(inner, name, *prefixes)


def _show(settings: Settings, model: str) -> ollama.ShowResponse:
    """Ask /api/show about a model (the prefetched answer if there is one)."""
    with _reading("/api/show", (TypeError, AttributeError)):
        answer = prefetch.take_show(settings.ollama_host, model)
        if answer is None:
            return client(settings).show(model)
        return ollama.ShowResponse(**answer)


def show(settings: Settings, model: str) -> ModelInfo:
    """Probe a model's capabilities and sizes through /api/show (or its prefetched answer)."""
    response = _show(settings, model)
    info = response.modelinfo or {}
    capabilities = list(response.capabilities or ())
    context = next((v for k, v in info.items() if k.endswith(".context_length")), None)
    dimension = _declare(settings, model, capabilities, info)
    return ModelInfo(model, tuple(capabilities), context, dimension)


def embed_context(settings: Settings, model: str | None = None, allow_chat: bool = False) -> int:
    """Return how many tokens the embedding model reads per input as Ollama runs it: its
    trained context, capped by the Modelfile's num_ctx (Ollama's default when unset).

    A model Ollama does not list as an embedding model is refused unless `allow_chat`: a chat
    model answers /api/embed too, with vectors that retrieve poorly, and a store built with
    it must be rebuilt to change model.
    """
    name = model or settings.embed_model
    with _reading("/api/show", (TypeError, AttributeError)):
        response = client(settings).show(name)
    capabilities = list(response.capabilities or ())
    if capabilities and "embedding" not in capabilities and not allow_chat:
        raise ArchivistError(
            f"'{name}' is not an embedding model (Ollama lists it as: {', '.join(capabilities)}).",
            "Use an embedding model: --embed-model nomic-embed-text (or set "
            "ARCHIVIST_EMBED_MODEL; ollama pull nomic-embed-text), or pass "
            "--allow-chat-embedder to embed with it anyway.",
        )
    info = response.modelinfo or {}
    _declare(settings, name, capabilities, info)
    return context_of(info, response.parameters or "")


def version(settings: Settings) -> str:
    """Return the Ollama server's version (raises if it cannot be reached)."""
    kwargs = _client_kwargs(settings, min(5.0, settings.timeout))
    host = split_credentials(settings.ollama_host)[0]
    with httpx.Client(base_url=host, **kwargs) as http:
        response = http.get("/api/version")
    if response.is_error:
        raise ollama.ResponseError(response.text, response.status_code)
    with _reading("/api/version", (AttributeError,)):
        return str(response.json().get("version", "?"))


def pull(settings: Settings, model: str, on_progress: Callable[[str, int, int], None]) -> None:
    """Pull a model through /api/pull, reporting (status, completed, total) as it goes."""
    with _reading("/api/pull"):
        for update in client(settings).pull(model, stream=True):
            on_progress(update.status or "", update.completed or 0, update.total or 0)


# Alternatives read at the first answer token: enough to find both "yes" and "no" (and their
# capitalised forms) for a model that follows the instruction.
RERANK_TOP_LOGPROBS = 5
LOGPROBS_RELEASE = (0, 12, 11)
"""The first Ollama release that returns log-probabilities."""
# (host, model) pairs whose answers were seen to carry log-probabilities in this process: an
# evaluation or an MCP server builds its tools many times and need not ask again.
_LOGPROBS_SEEN: set[tuple[str, str]] = set()


def yes_probability(alternatives: Any) -> float:
    """The probability of "yes" among a token's top alternatives, against "no": 0 to 1, 0 when
    neither is among them. Case, spaces and quoting around the word do not matter."""
    mass = {"yes": 0.0, "no": 0.0}
    for alternative in alternatives:
        word = alternative.token.strip().strip("*\"'.:").lower()
        if word in mass:
            mass[word] += math.exp(alternative.logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total else 0.0


def relevance_scorer(settings: Settings, model: str) -> Scorer:
    """Build the function that scores a passage's relevance to a query with an Ollama model:
    one short /api/chat request (a yes-or-no question, one answer token, its top
    log-probabilities), scored as the probability of "yes".

    The model is checked first: it must exist (else ModelMissing, with the pull to run), be
    able to chat, and its answers must carry log-probabilities (Ollama 0.12.11 and later) —
    else an ArchivistError that names the fix.
    """
    info = show(settings, model)
    if info.capabilities and "completion" not in info.capabilities:
        raise ArchivistError(
            f"'{model}' cannot rerank: it does not answer prompts (Ollama lists it as: "
            f"{', '.join(info.capabilities)}).",
            "Rerank with a chat model (--rerank qwen2.5:3b) or a reranker model published for "
            "Ollama, or search without --rerank.",
        )
    ollama_client = client(settings)
    # A thinking model would spend its one token on reasoning; Ollama refuses `think` to others.
    think = False if info.thinking else None

    def score(query: str, passage: str) -> float:
        # Escaped as the agent's search results are: the passage cannot close its block.
        request = prompts.RERANK_REQUEST.format(query=query, passage=escape(passage, quote=False))
        response = ollama_client.chat(
            model,
            messages=[
                {"role": "system", "content": prompts.RERANK_SYSTEM},
                {"role": "user", "content": request},
            ],
            think=think,
            logprobs=True,
            top_logprobs=RERANK_TOP_LOGPROBS,
            options={"temperature": 0, "num_predict": 1},
            stream=False,
        )
        if not response.logprobs:
            raise _no_logprobs(settings, model)
        first = response.logprobs[0]
        return yes_probability(first.top_logprobs or [first])

    if (settings.ollama_host, model) not in _LOGPROBS_SEEN:
        score("reranking check", "A passage to check that the model's answers carry logprobs.")
        _LOGPROBS_SEEN.add((settings.ollama_host, model))
    return score


def _no_logprobs(settings: Settings, model: str) -> ArchivistError:
    """Say why an answer came without log-probabilities: an Ollama too old, or the model."""
    host = mask_url(settings.ollama_host)
    try:
        running = version(settings)
    except (httpx.HTTPError, ValueError):
        running = "?"
    release = tuple(int(part) for part in re.findall(r"\d+", running)[:3])
    if release and release < LOGPROBS_RELEASE:
        return ArchivistError(
            f"Ollama {running} at {host} does not return log-probabilities, which --rerank "
            "needs to score passages.",
            "Update Ollama to 0.12.11 or later (https://ollama.com/download), or search "
            "without --rerank (unset ARCHIVIST_RERANK_MODEL).",
        )
    return ArchivistError(
        f"'{model}' answered without log-probabilities (Ollama {running} at {host}), so it "
        "cannot score passages for --rerank.",
        "Rerank with another model (a chat model such as qwen2.5:3b, or a reranker model "
        "published for Ollama), or search without --rerank (unset ARCHIVIST_RERANK_MODEL).",
    )


_MODEL_NOT_FOUND = re.compile(r"""model ['"]([^'"]+)['"] not found""")


def explain(exc: BaseException, settings: Settings) -> ArchivistError | None:
    """Turn an Ollama client failure into a message that says what to do, if it is one."""
    host = mask_url(settings.ollama_host)
    if isinstance(exc, ConnectionError | httpx.ConnectError | httpx.RemoteProtocolError):
        return OllamaUnreachable(
            f"Cannot reach Ollama at {host}.",
            "Start it with `ollama serve` (or open the Ollama app), or set OLLAMA_HOST to the "
            "address of a running Ollama.",
        )
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return ArchivistError(
            f"Ollama at {host} did not answer within {settings.timeout:g} s.",
            "The model may still be loading; try again, or raise ARCHIVIST_TIMEOUT.",
        )
    if isinstance(exc, httpx.ReadError | httpx.WriteError):
        return ArchivistError(
            f"The connection to Ollama at {host} was cut ({exc or type(exc).__name__}).",
            "Check that Ollama is running at that address; a proxy or firewall in between may "
            "be resetting connections. Then run the same command again.",
        )
    if isinstance(exc, UnreadableAnswer):
        return ArchivistError(
            f"What answers at {host} is not speaking Ollama's API: {exc.path} gave {exc.problem}.",
            "Check that OLLAMA_HOST is Ollama's own address, not another server's or a proxy's "
            "page, and that Ollama is up to date; `archivist doctor` checks the setup.",
        )
    if isinstance(exc, ollama.ResponseError):
        if exc.status_code in (401, 403):
            return refused(settings, exc)
        if exc.status_code == 404 and (match := _MODEL_NOT_FOUND.search(exc.error)):
            name = match.group(1)
            return ModelMissing(
                f"The model '{name}' is not available in Ollama at {host}.",
                f"Pull it with `ollama pull {name}`, or choose another model.",
                name,
            )
        return ArchivistError(
            f"Ollama at {host} answered with an error: {exc.error}",
            "Check the Ollama server's log; `archivist doctor` checks the whole setup.",
        )
    return _explain_qdrant(exc, settings) or _explain_disk(exc, settings)


def refused(settings: Settings, exc: ollama.ResponseError) -> ArchivistError:
    """Word a 401 or 403 from Ollama's address: the credentials, not a model, are the matter."""
    host = mask_url(settings.ollama_host)
    status = f"{exc.status_code} {'Unauthorized' if exc.status_code == 401 else 'Forbidden'}"
    if split_credentials(settings.ollama_host)[1]:
        return ArchivistError(
            f"Ollama at {host} refused the credentials in OLLAMA_HOST ({status}).",
            "Correct the user name and password in OLLAMA_HOST "
            "(http://USER:PASSWORD@host:port; a character such as @ or : in them written "
            "%40, %3A).",
        )
    return ArchivistError(
        f"Ollama at {host} asks for credentials ({status}).",
        "Put the user name and password in OLLAMA_HOST: http://USER:PASSWORD@host:port.",
    )


# What the operating system says when Archivist's home cannot take a write.
_FULL = (errno.ENOSPC, errno.EDQUOT)
_UNWRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR)
_SQLITE_UNWRITABLE = ("unable to open database file", "readonly database", "disk is full")


def _explain_disk(exc: BaseException, settings: Settings) -> ArchivistError | None:
    """Turn a full disk or an unusable home into a message that says where and what to do."""
    home = settings.home
    if isinstance(exc, sqlite3.OperationalError) and any(
        reason in str(exc) for reason in _SQLITE_UNWRITABLE
    ):
        return ArchivistError(
            f"Cannot write the conversation history and turn log in {home}: {exc}.",
            f"Free space on its disk and make {home} writable, or set ARCHIVIST_HOME to a "
            "folder you can write to.",
        )
    if not isinstance(exc, OSError) or exc.errno not in (*_FULL, *_UNWRITABLE):
        return None
    where = exc.filename or home
    if exc.errno in _FULL:
        return ArchivistError(
            f"The disk is full: cannot write {where}.",
            "Free space on that disk, or set ARCHIVIST_HOME to a folder on another disk, then "
            "run the same command again: what was stored is kept.",
        )
    return ArchivistError(
        f"Cannot write {where}: {exc.strerror}.",
        f"Archivist keeps its stores and history in {home}: make it writable, or set "
        "ARCHIVIST_HOME to a folder you can write to.",
    )


@contextmanager
def explained(settings: Settings, doing: str = "", then: str = "") -> Iterator[None]:
    """Re-raise an expected Ollama or Qdrant failure inside the block as an ArchivistError.

    `doing` prefixes the message ("Ingest stopped: …"), `then` is added to the fix (what was
    kept, how to resume). Archivist's own errors pass as they are; unexpected ones too.
    """
    try:
        yield
    except ArchivistError:
        raise
    except Exception as exc:
        error = explain(exc, settings)
        if error is None:
            raise
        if not doing and not then:
            raise error from None  # as worded, its kind kept (a missing model, say)
        message = f"{doing}: {error.message}" if doing else error.message
        fix = "\n".join(part for part in (error.fix, then) if part) or None
        raise ArchivistError(message, fix) from None


def _explain_qdrant(exc: BaseException, settings: Settings) -> ArchivistError | None:
    """Turn a Qdrant server's failure into a message; the URL is masked, the key never shown."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if not settings.qdrant_url:
        return None
    where = mask_url(settings.qdrant_url)
    if isinstance(exc, ResponseHandlingException):
        return ArchivistError(
            f"Cannot reach the Qdrant server at {where}: {exc.source}.",
            "Start it, or correct QDRANT_URL; unset QDRANT_URL to use the embedded store.",
        )
    if isinstance(exc, UnexpectedResponse):
        status = f"{exc.status_code} {exc.reason_phrase}".strip()
        fix = "Check QDRANT_API_KEY." if exc.status_code in (401, 403) else "Check its log."
        return ArchivistError(f"The Qdrant server at {where} answered {status}.", fix)
    return None
