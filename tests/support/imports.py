"""The import statements of a module's source, read with ``ast`` (never by importing it), for
the tests that hold the package's shape: the wire boundary and the layers."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator


def import_statements(
    source: str, module: str, is_package: bool = False, *, run_time_only: bool = False
) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each import of ``source`` as (the module it names, the names it takes from it): ``import
    a.b`` is ``("a.b", ())``, ``from .x import y`` is ``(<x resolved against module>, ("y",))``.
    Every statement counts: inside functions and under ``TYPE_CHECKING`` too, but with
    ``run_time_only``, which leaves out what sits under ``if TYPE_CHECKING:`` (annotations only)."""
    package = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(source)
    never_run = _type_checking_blocks(tree) if run_time_only else ()
    skipped = {id(node) for block in never_run for node in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = importlib.util.resolve_name("." * node.level + (node.module or ""), package) if node.level else ""
            yield base or node.module or "", tuple(alias.name for alias in node.names)


def _type_checking_blocks(tree: ast.AST) -> Iterator[ast.stmt]:
    """The statements under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): never run."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            yield from node.body
