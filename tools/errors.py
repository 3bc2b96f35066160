"""Errors that carry the fix: every expected failure tells the user what to do next."""

import sys
from pathlib import Path

RUN_STAMP = ".pyproject.sha256"
"""The file `./run` keeps in the virtual environment it made (what it installed)."""


def install_command(extra: str, prefix: str | None = None, cwd: Path | None = None) -> str:
    """The command that installs an optional extra into the running Archivist: `./run --with
    EXTRA` in a checkout's `./run` environment (the path to `run` when the user is elsewhere),
    else `pip install 'archivist[EXTRA]'`."""
    venv = Path(sys.prefix if prefix is None else prefix)
    checkout = venv.parent
    if not ((venv / RUN_STAMP).is_file() and (checkout / "run").is_file()):
        return f"pip install 'archivist[{extra}]'"
    try:
        here = Path.cwd() if cwd is None else cwd
    except OSError:  # the folder the user is in was removed
        here = None
    run = "./run" if here is not None and here.resolve() == checkout.resolve() else checkout / "run"
    return f"{run} --with {extra}"


class ArchivistError(RuntimeError):
    """An expected failure with a message a person can act on.

    A RuntimeError, so servers that show a failed run's message only for the builtin kinds
    (LangGraph Server shows "An internal error occurred" for the others) show this one's:
    it is written for the person who can fix it.
    """

    def __init__(self, message: str, fix: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.fix = fix

    def __str__(self) -> str:
        return f"{self.message}\n{self.fix}" if self.fix else self.message

    def _render_traceback_(self) -> list[str]:
        """Show the message and its fix in Jupyter instead of a traceback (IPython's hook)."""
        # Red for the message, as IPython colours an error's name; the fix in plain text.
        return [
            f"\x1b[31m{type(self).__name__}: {self.message}\x1b[0m",
            *(self.fix or "").splitlines(),
        ]


class StoreNotFound(ArchivistError):
    """The named store does not exist yet."""


class StoreMismatch(ArchivistError):
    """The store was built with another embedding model or index settings."""


class StoreLocked(ArchivistError):
    """Another process holds the embedded store."""


class OllamaUnreachable(ArchivistError):
    """Nothing answers at Ollama's address."""


class ModelMissing(ArchivistError):
    """Ollama does not have a model Archivist needs."""

    def __init__(self, message: str, fix: str | None = None, model: str = "") -> None:
        super().__init__(message, fix)
        self.model = model


class DiskFull(ArchivistError):
    """The disk holding the embedded store has too little room left to write safely."""


class StoreDamaged(ArchivistError):
    """A store's files are damaged: what they declare does not hold, or its vectors changed."""

    def __init__(self, name: str, what: str) -> None:
        super().__init__(
            f"Store '{name}' is damaged: {what}.",
            f"Run `archivist doctor --repair` to set it aside and ingest its sources into it "
            f"again (or `archivist delete --store {name} --yes`, then ingest them again).",
        )
        self.name = name
        self.what = what
