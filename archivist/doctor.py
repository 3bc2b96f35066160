"""`archivist doctor`: check each part of the setup and say how to fix what is wrong."""

from dataclasses import dataclass

from archivist.failures import explain, explained
from archivist.ollama import Ollama
from archivist.settings import Settings, mask_url
from archivist.stores import store_language_notice
from archivist.tools import sparse
from archivist.tools.errors import ArchivistError, ModelMissing, StoreDamaged
from archivist.tools.store import KnowledgeStore, connect, list_stores, sparse_hint


@dataclass
class Check:
    ok: bool
    message: str
    fix: str = ""
    warning: bool = False


def run_checks(settings: Settings, repair: bool = False) -> list[Check]:
    """Check Ollama, the chat and embedding models, and the Qdrant stores; with `repair`,
    set damaged embedded stores aside so that ingesting their sources builds them again."""
    host = mask_url(settings.ollama_host)
    checks = []
    try:
        checks.append(Check(True, f"Ollama {Ollama(settings).version()} at {host}"))
    except Exception as exc:
        error = explain(exc, settings)
        unreachable = error is None or error.message.startswith("Cannot reach")
        checks.append(
            Check(
                False,
                f"Ollama is not reachable at {host}" if unreachable else error.message,
                "Start it with `ollama serve`, or set OLLAMA_HOST."
                if unreachable
                else error.fix or "",
            )
        )
    if checks[0].ok:
        checks.append(_model_check(settings, settings.chat_model, "chat"))
        checks.append(_model_check(settings, settings.embed_model, "embedding"))
        if settings.rerank_model:
            checks.append(_rerank_check(settings, settings.rerank_model))
    stores, built_with, hints = _store_check(settings, repair)
    checks.append(stores)
    checks.extend(hints)
    if checks[0].ok:
        for model, names in built_with.items():
            if model != settings.embed_model:
                checks.append(_store_model_check(settings, model, names))
    checks.append(_tracing_check(settings))
    return checks


def _damaged(settings: Settings, client, exc: StoreDamaged, repair: bool) -> Check:
    """The check of a damaged store; with `repair`, the store is set aside first."""
    set_aside = getattr(client, "set_aside", None)
    if not repair or set_aside is None:
        fix = (
            exc.fix if set_aside else "Delete it (archivist delete --store NAME) and ingest again."
        )
        return Check(False, exc.message, fix)
    with client.writing():
        moved = set_aside(exc.name, settings.home / "damaged")
    return Check(
        True,
        f"store '{exc.name}' was damaged ({exc.what}): its files were moved to {moved}",
        f"Ingest its sources again to build it anew: archivist ingest PATH --store {exc.name}",
        warning=True,
    )


def _store_model_check(settings: Settings, model: str, stores: list[str]) -> Check:
    """Check a model other stores were built with: their queries need it."""
    built = f"store{'s' if len(stores) > 1 else ''} {', '.join(stores)}"
    try:
        Ollama(settings).show(model)
    except Exception as exc:
        error = explain(exc, settings)
        return Check(
            False,
            f"embedding model '{model}' of {built}: {error.message if error else exc}",
            f"Pull it with `ollama pull {model}`: a store is searched with the model it was "
            "built with."
            if isinstance(error, ModelMissing)
            else _fix(error),
        )
    return Check(True, f"embedding model '{model}' of {built}")


def _rerank_check(settings: Settings, model: str) -> Check:
    """Check the rerank model (ARCHIVIST_RERANK_MODEL): it must answer with log-probabilities."""
    try:
        with explained(settings):
            Ollama(settings).relevance_scorer(model)
    except ArchivistError as exc:
        return Check(False, f"rerank model '{model}': {exc.message}", exc.fix or "")
    return Check(True, f"rerank model '{model}' (answers with log-probabilities)")


def _fix(error: ArchivistError | None) -> str:
    return (error.fix if error else None) or "Check the Ollama server's log."


def _tracing_check(settings: Settings) -> Check:
    tracing = settings.tracing
    if tracing is None and settings.tracing_warning:
        return Check(False, settings.tracing_warning, warning=True)
    if tracing is None:
        return Check(True, "LangSmith tracing is off: questions and passages stay on this machine")
    return Check(
        False,
        f"LangSmith tracing is on ({tracing.variable}=true): every run, with its questions and "
        f"passages, is sent to {tracing.endpoint} (project '{tracing.project}')",
        f"If you did not mean to share them, unset {tracing.variable}.",
        warning=True,
    )


def _model_check(settings: Settings, name: str, role: str) -> Check:
    try:
        info = Ollama(settings).show(name)
    except Exception as exc:
        error = explain(exc, settings)
        return Check(
            False,
            f"{role} model '{name}': {error.message if error else exc}",
            # Only a model Ollama says it lacks is pulled; refused credentials, a timeout or
            # a broken answer have their own fix.
            f"Pull it with `ollama pull {name}`."
            if isinstance(error, ModelMissing)
            else _fix(error),
        )
    if role == "embedding":
        if "embedding" not in info.capabilities:
            return Check(
                False,
                f"'{name}' is not an embedding model",
                "Set ARCHIVIST_EMBED_MODEL to an embedding model, e.g. nomic-embed-text.",
            )
        return Check(True, f"embedding model '{name}' ({info.embedding_length} dimensions)")
    if not info.tools:
        return Check(
            False,
            f"chat model '{name}' cannot call tools: Archivist will retrieve first, then answer",
            "For the agent, use a tool-calling model "
            "such as qwen2.5:3b (--model or ARCHIVIST_CHAT_MODEL).",
            warning=True,
        )
    return Check(True, f"chat model '{name}' (tools; context {info.context_length})")


def _store_check(
    settings: Settings, repair: bool = False
) -> tuple[Check, dict[str, list[str]], list[Check]]:
    """Open the stores; return the check, which embedding model built which stores, and a
    check per store whose keyword vectors are of an older (a warning) or unknown scheme, or
    that is damaged (set aside, with `repair`)."""
    built_with: dict[str, list[str]] = {}
    hints: list[Check] = []
    try:
        client = connect(
            settings.store_path,
            settings.qdrant_url,
            settings.qdrant_api_key,
            prefer_grpc=settings.qdrant_grpc,
            timeout=settings.qdrant_timeout,
            legacy_path=settings.legacy_store_path,
        )
        names = list_stores(client)
        for name in names:
            try:
                store = KnowledgeStore(client, name)
                store.count()  # opens the shard: its files are checked
                fingerprint = store.fingerprint
            except StoreDamaged as exc:
                hints.append(_damaged(settings, client, exc, repair))
                continue
            model = fingerprint.get("embed_model")
            if model:
                built_with.setdefault(model, []).append(name)
            texts = store.sample_texts()  # a look at its language, for both notices
            notice = store_language_notice(store, texts)
            if notice:
                hints.append(Check(False, notice, warning=True))
            hint = sparse_hint(name, fingerprint.get("sparse"), texts)
            if hint:
                # An older scheme still works (a warning); an unknown one cannot be searched.
                known = fingerprint.get("sparse") in sparse.SCHEMES
                hints.append(Check(False, hint, warning=known))
        client.close()
    except ArchivistError as exc:
        return Check(False, exc.message, exc.fix or ""), built_with, hints
    except Exception as exc:
        if settings.qdrant_url:
            fix = (
                "Check QDRANT_URL and QDRANT_API_KEY, or unset QDRANT_URL to use the "
                "embedded store."
            )
        else:
            fix = (
                "Run `archivist doctor --repair` to set a damaged store aside, or set "
                "ARCHIVIST_HOME to another folder."
            )
        failed = Check(False, f"Qdrant at {settings.qdrant_location} cannot be opened: {exc}", fix)
        return failed, built_with, hints
    listed = ", ".join(names) if names else "no stores yet"
    return Check(True, f"Qdrant at {settings.qdrant_location}: {listed}"), built_with, hints
