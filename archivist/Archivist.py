"""Reached only when `archivist` is not this package but a folder of that name.

`from archivist import Archivist` finds the class through the package's `__getattr__`. When a
script sits beside a folder named `archivist/` that has no `__init__.py` (a clone of this
repository, say), Python imports that folder instead, as a namespace package, ahead of an
editable install, whose modules it still finds. The name is then looked up as a module, and
this one is found: it says why the import failed and what to do.
"""

import sys

_shadow = [str(p) for p in getattr(sys.modules.get("archivist"), "__path__", [])]
raise ImportError(
    f"`import archivist` found the folder {', '.join(_shadow) or 'archivist/'} beside your "
    "script, not the installed package: Python imports a folder named like a package from the "
    "script's own folder first. Run the script from another folder, or rename that folder "
    "(e.g. a clone: git clone ... archivist-src); `from archivist.app import Archivist` works "
    "either way."
)
