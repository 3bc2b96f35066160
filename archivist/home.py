"""The home folder (ARCHIVIST_HOME): made private to its user, or refused with the fix."""

import os
import stat
from pathlib import Path

from archivist.tools.errors import ArchivistError

PRIVATE_DIR = 0o700


def ensure_home(home: Path) -> Path:
    """Create the home folder readable by its user alone (0700, whatever the umask), and
    tighten one that others can read (it holds the turn log and every store); refuse a path
    that cannot be a folder (too long a name, under /proc) with what to do."""
    try:
        home.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
        mode = home.stat().st_mode
        if stat.S_IMODE(mode) & 0o077 and home.owner() == Path.home().owner():
            home.chmod(PRIVATE_DIR)
    except OSError as exc:
        raise ArchivistError(
            f"Cannot write {home}: {exc.strerror or exc}.",
            f"Archivist keeps its stores and history in {home}: make it writable, or set "
            "ARCHIVIST_HOME to a folder you can write to.",
        ) from None
    except KeyError:  # an owner with no name (a container's user): leave the mode as it is
        pass
    return home


def private_umask() -> int:
    """Make files this process creates private to its user (0600, folders 0700); return the
    umask it had. The command line sets it once; the stores' engine and SQLite create files
    with the process's umask, which cannot be passed to them otherwise."""
    return os.umask(0o077)
