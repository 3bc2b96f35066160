"""Both engines offer every method of the declared `Engine` seam, callable as the stores call
them; and the stores call nothing else."""

import ast
import inspect
from pathlib import Path

import pytest
from qdrant_client import QdrantClient

from archivist.tools.edge import EdgeClient
from archivist.tools.engine import Engine

TOOLS = Path(__file__).resolve().parent.parent / "tools"
METHODS = sorted(
    name for name, value in vars(Engine).items() if callable(value) and not name.startswith("_")
)


def _problems(engine: type, name: str) -> list[str]:
    """Why `engine.name` cannot be called the way the Protocol declares (none: it can)."""
    wanted = list(inspect.signature(getattr(Engine, name)).parameters.values())[1:]
    method = getattr(engine, name, None)
    if method is None:
        return [f"{engine.__name__} has no {name}"]
    given = list(inspect.signature(method).parameters.values())[1:]
    by_name = {p.name: p for p in given}
    problems = []
    for position, param in enumerate(wanted):
        found = by_name.get(param.name)
        if found is None:
            if not any(p.kind is p.VAR_KEYWORD for p in given):
                problems.append(f"{name}: no argument {param.name}")
            continue
        if param.kind is param.POSITIONAL_OR_KEYWORD and given.index(found) != position:
            problems.append(f"{name}: {param.name} is not argument {position + 1}")
        if found.kind in (found.POSITIONAL_ONLY, found.VAR_POSITIONAL):
            problems.append(f"{name}: {param.name} cannot be passed by name")
        if param.default is not param.empty and found.default is found.empty:
            problems.append(f"{name}: {param.name} must be optional")
    declared = {p.name for p in wanted}
    for extra in given:
        required = extra.default is extra.empty and extra.kind in (
            extra.POSITIONAL_OR_KEYWORD,
            extra.KEYWORD_ONLY,
        )
        if required and extra.name not in declared:
            problems.append(f"{name}: requires {extra.name}, which the stores never pass")
    return problems


def test_the_seam_lists_the_methods_the_stores_use():
    assert METHODS == [
        "close",
        "collection_exists",
        "count",
        "create_collection",
        "create_payload_index",
        "delete",
        "delete_collection",
        "facet",
        "get_collection",
        "get_collections",
        "query_batch_points",
        "scroll",
        "update_collection",
        "upsert",
    ]


@pytest.mark.parametrize("engine", [EdgeClient, QdrantClient], ids=["edge", "qdrant-client"])
@pytest.mark.parametrize("name", METHODS)
def test_each_engine_takes_each_method_as_declared(engine, name):
    assert _problems(engine, name) == []


def test_the_check_catches_a_method_that_cannot_be_called_as_declared():
    class Partial:
        def count(self, name, exact, count_filter=None): ...

        def scroll(self, collection_name, limit, *args): ...

    assert _problems(Partial, "close") == ["Partial has no close"]
    assert _problems(Partial, "count") == [
        "count: no argument collection_name",
        "count: exact must be optional",
        "count: requires name, which the stores never pass",
    ]
    assert "scroll: no argument scroll_filter" in _problems(Partial, "scroll")


def _client_calls(path: Path) -> set[str]:
    """The methods a module calls on a `client` (`self.client.x`, `source.client.x`, …)."""
    calls = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if name in ("client", "engine"):
                calls.add(node.func.attr)
    return calls


def test_the_stores_call_only_methods_of_the_seam():
    modules = ("store.py", "migrate.py", "engine.py")
    called = set().union(*(_client_calls(TOOLS / module) for module in modules))
    assert {"scroll", "upsert", "query_batch_points"} <= called
    assert called <= set(METHODS), called - set(METHODS)
