"""Failures worded for the user: what Ollama, a Qdrant server or the disk refused, with the
fix; a query's missing model named as its store's own; a failed call that releases the store
it opened."""

from __future__ import annotations

import errno
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from archivist.settings import Settings, mask_url, split_credentials
from archivist.tools.errors import ArchivistError, ModelMissing, OllamaUnreachable

if TYPE_CHECKING:
    from archivist.tools.embedding import PrefixedEmbeddings
    from archivist.tools.store import KnowledgeStore


def query_error(
    settings: Settings, store: KnowledgeStore, embedder: PrefixedEmbeddings, exc: Exception
) -> Exception:
    """Word an expected failure of a query to `store`, embedded by `embedder`, with its fix
    (else return `exc`).

    A missing embedding model is named as the store's own: its queries need that model,
    whichever is configured for new stores.
    """
    error = explain(exc, settings)
    if error is None:
        return exc
    if not isinstance(error, ModelMissing) or error.model != embedder.model:
        return error
    fix = f"Pull it with `ollama pull {embedder.model}`: a store is searched with the model "
    fix += "that embedded its chunks."
    if embedder.model != settings.embed_model:
        fix += (
            f" Or rebuild the store with {settings.embed_model}: "
            f"archivist ingest PATH --store {store.name} --reindex"
        )
    return ModelMissing(
        f"Store '{store.name}' was built with the embedding model '{embedder.model}', which "
        f"Ollama at {mask_url(settings.ollama_host)} does not have.",
        fix,
        embedder.model,
    )


@contextmanager
def released_on_failure(
    settings: Settings,
    release: Callable[[], None] | None,
    doing: str = "",
    then: str = "",
) -> Iterator[None]:
    """Explain an Ollama or Qdrant failure in the block; call `release` (if given) when the
    block fails.

    A notebook's kernel outlives a failed cell: a call that fails on its first use of the
    store must not leave it locked against the other notebooks and the command line. A
    store opened before stays open (no `release`): the caller may hold stores and agents
    that use it.
    """
    try:
        try:
            yield
        except Exception as exc:
            if isinstance(exc, ArchivistError):
                raise
            with explained(settings, doing, then):
                raise
    except BaseException:
        if release is not None:
            release()
        raise


_MODEL_NOT_FOUND = re.compile(r"""model ['"]([^'"]+)['"] not found""")


def explain(exc: BaseException, settings: Settings) -> ArchivistError | None:
    """Turn an expected failure (Ollama's, the Qdrant server's, the disk's) into a message
    that says what to do, if it is one."""
    return (
        _explain_ollama(exc, settings)
        or _explain_qdrant(exc, settings)
        or _explain_disk(exc, settings)
    )


def _explain_ollama(exc: BaseException, settings: Settings) -> ArchivistError | None:
    """Word a failure of a request to Ollama, whichever client made it."""
    import httpx

    from archivist.ollama.transport import Cut, UnreadableAnswer, status_of

    host = mask_url(settings.ollama_host)
    if isinstance(exc, Cut | httpx.ReadError | httpx.WriteError):
        return ArchivistError(
            f"The connection to Ollama at {host} was cut ({exc or type(exc).__name__}).",
            "Check that Ollama is running at that address; a proxy or firewall in between may "
            "be resetting connections. Then run the same command again.",
        )
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
    if isinstance(exc, UnreadableAnswer):
        return ArchivistError(
            f"What answers at {host} is not speaking Ollama's API: {exc.path} gave {exc.problem}.",
            "Check that OLLAMA_HOST is Ollama's own address, not another server's or a proxy's "
            "page, and that Ollama is up to date; `archivist doctor` checks the setup.",
        )
    if status_of(exc) is not None:
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
    return None


def refused(settings: Settings, exc: Any) -> ArchivistError:
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
    import sqlite3

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
