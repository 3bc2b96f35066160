"""Any LangChain document loader, named for a file pattern (`--loader '*.xml=module:Class'`).

The loaders of `langchain-community` (the optional extra `archivist[community]`) and of other
packages plug in here: the class is built with the file's path and its documents become
sections, so the rest of the ingest sees one interface.
"""

import importlib
from pathlib import Path
from typing import Any

from archivist.ingest.loaders.base import LoaderOptions, LoadError, Section, jsonable
from archivist.tools.errors import install_command


def load_with(spec: str, path: Path) -> list[Section]:
    """Load a file with the LangChain document loader `module:Class` named by `spec`."""
    loader_class = loader_class_for(spec)
    documents = loader_class(str(path)).load()
    return [
        Section(doc.page_content, _metadata(doc.metadata))
        for doc in documents
        if doc.page_content and doc.page_content.strip()
    ]


def loader_class_for(spec: str) -> Any:
    """Import the loader class `module:Class`, or raise LoadError saying what to install."""
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise LoadError(f"'{spec}' is not a loader: name it as module:Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        community = "langchain_community" in spec
        extra = f" ({install_command('community')})" if community else ""
        raise LoadError(f"loader {spec} cannot be imported: {exc}{extra}") from None
    loader_class = getattr(module, class_name, None)
    if loader_class is None:
        raise LoadError(f"loader {spec}: {module_name} has no {class_name}")
    return loader_class


def _metadata(values: dict[str, Any]) -> dict[str, Any]:
    # The file's own path is already the chunk's source; a loader's `source` would repeat it.
    return {
        str(k): jsonable(v)
        for k, v in values.items()
        if k != "source" and isinstance(v, str | int | float | bool) and v != ""
    }


def loader_for(options: LoaderOptions, path: Path) -> str | None:
    """The loader spec the options name for a file (its pattern matched on the file's name,
    or on its whole path when the pattern has a `/`)."""
    if not options.extra_loaders:  # the commonest case, asked for every file of a folder
        return None
    from fnmatch import fnmatch

    for pattern, spec in options.extra_loaders:
        if fnmatch(path.as_posix() if "/" in pattern else path.name, pattern):
            return spec
    return None
