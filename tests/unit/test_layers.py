"""The layers of ``proxy``: every import points down the table below, and no module reaches
itself again through its imports. A newcomer reads the package top to bottom, in the order a
request travels; a module that needs something above it is in the wrong place.

The table is the one place the order is written. A unit is a subpackage (``proxy.loop``) or a
module at the root (``proxy.request``); modules of one unit import each other freely (but not in
a circle). Units on one row are siblings: neither imports the other. Every import counts,
including those under ``TYPE_CHECKING`` and inside functions: a type-only import still makes
the lower module name the upper one, and a type checker still walks the circle.
"""

from __future__ import annotations

import importlib.util
import pkgutil
from functools import cache
from pathlib import Path

import pytest

import proxy
from tests.support.imports import import_statements

LAYERS: list[tuple[str, ...]] = [
    # ``python -m proxy``, then the public API and the command line: they start everything below
    ("proxy.__main__",),
    ("proxy", "proxy.cli"),
    # authenticate, pick the format, hand over; the sessions API and the console
    ("proxy.edge",),
    # one loop per request: attempts, answers, endings, continuity, the step log, recording
    ("proxy.loop",),
    # a guarded stream: read upstream events, hold back what a guard may still object to, relay
    # the rest in the request's format (so above the guards it asks and the wire it speaks)
    ("proxy.streaming",),
    # decide, never act: the guards, and goal mode as a participant of the loop
    ("proxy.guards", "proxy.goal"),
    # the judge's client: asked by the premature-stop guard and by goal mode
    ("proxy.judge",),
    # what a session and a tenant may still spend; the books read the agent's request
    ("proxy.books",),
    # the agent's request as every layer above reads it: it composes a policy, a session
    # reference and a wire format, so it sits above those
    ("proxy.request",),
    # formats, storage, configuration
    ("proxy.wire", "proxy.session", "proxy.policy"),
    # the shared vocabulary: typed verdicts over the neutral exchange
    ("proxy.verdict",),
    ("proxy.exchange",),
    # I/O behind injected seams and the plumbing every layer may use
    ("proxy.upstream",),
    ("proxy.observe", "proxy.schemas"),
    ("proxy.settings", "proxy.errors", "proxy.version", "proxy.text"),
]
MAX_LINES = 450
RANK = {unit: rank for rank, row in enumerate(LAYERS) for unit in row}


@cache
def modules() -> dict[str, Path]:
    """Every module of the package, found by walking it (a new module is covered), with its file."""
    found = {"proxy": Path(proxy.__file__ or "")}
    for info in pkgutil.walk_packages(proxy.__path__, "proxy."):
        spec = importlib.util.find_spec(info.name)
        assert spec is not None, info.name
        assert spec.origin is not None, info.name
        found[info.name] = Path(spec.origin)
    return found


def unit(module: str) -> str:
    """The row entry a module belongs to: its subpackage, or itself at the root."""
    return ".".join(module.split(".")[:2])


def imports(module: str, source: str, is_package: bool, known: set[str]) -> set[str]:
    """The ``proxy`` modules ``source`` imports; ``from a import b`` names ``a.b`` when that is
    a module, ``a`` otherwise."""
    found = {
        f"{base}.{name}" if f"{base}.{name}" in known else base
        for base, names in import_statements(source, module, is_package)
        for name in names or ("",)
    }
    return {name for name in found if name in known and name != module}


@cache
def graph() -> dict[str, frozenset[str]]:
    known = set(modules())
    return {
        name: frozenset(imports(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known))
        for name, path in modules().items()
    }


def upward_imports(edges: dict[str, frozenset[str]]) -> list[str]:
    """Imports that do not point down the table (sideways to a sibling counts as up)."""
    return sorted(
        f"{source} -> {target}"
        for source, targets in edges.items()
        for target in targets
        if unit(source) != unit(target) and RANK[unit(target)] <= RANK[unit(source)]
    )


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in edges.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def test_the_walk_finds_every_package_and_root_module():
    found = {unit(name) for name in modules()}

    assert {"proxy.loop", "proxy.guards", "proxy.wire", "proxy.request", "proxy.errors"} <= found


def test_every_unit_of_the_package_has_a_row_in_the_table():
    assert sorted({unit(name) for name in modules()} - set(RANK)) == []


def test_no_row_of_the_table_names_a_unit_that_does_not_exist():
    assert sorted(set(RANK) - {unit(name) for name in modules()}) == []


def test_every_import_points_down_the_table():
    assert upward_imports(graph()) == []


def test_no_proxy_modules_import_each_other_in_a_circle():
    assert cycles(graph()) == []


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from proxy.books.budgets import estimate_tokens", {"proxy.books.budgets"}),
        ("import proxy.edge.http", {"proxy.edge.http"}),
        ("from proxy import errors", {"proxy.errors"}),
        ("from ..edge.http import reply_headers", {"proxy.edge.http"}),
        ("from . import reader", {"proxy.streaming.reader"}),
        ("def later():\n    from proxy.edge.http import reply_headers", {"proxy.edge.http"}),
        ("if TYPE_CHECKING:\n    from proxy.request import AgentRequest", {"proxy.request"}),
        ("from proxy.guards import ToolLoopGuard", {"proxy.guards"}),
        ("import json\nfrom litestar.types import Send", set()),
    ],
)
def test_every_spelling_of_an_import_is_read(source, expected):
    assert imports("proxy.streaming.client", source, False, set(modules())) == expected


def test_an_upward_import_is_reported():
    edges = {"proxy.streaming.client": frozenset({"proxy.edge.http"}), "proxy.edge.http": frozenset()}

    assert upward_imports(edges) == ["proxy.streaming.client -> proxy.edge.http"]


def test_an_import_of_a_sibling_on_the_same_row_is_reported():
    edges = {"proxy.guards.base": frozenset({"proxy.goal.keeper"}), "proxy.goal.keeper": frozenset()}

    assert upward_imports(edges) == ["proxy.guards.base -> proxy.goal.keeper"]


def test_imports_inside_one_unit_are_not_reported():
    edges = {"proxy.loop.pipeline": frozenset({"proxy.loop.finalize"}), "proxy.loop.finalize": frozenset()}

    assert upward_imports(edges) == []


def test_a_circle_through_three_modules_is_found():
    edges = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}

    assert cycles(edges) == [["a", "b", "c"]]


def test_no_module_is_over_the_line_limit():
    lengths = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}

    assert {name: n for name, n in lengths.items() if n > MAX_LINES} == {}
