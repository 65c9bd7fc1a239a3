"""The wire boundary: guards, the exchange types, the pipeline and the ledger never import a
wire format, and no module of the loop does at run time (it reads formats through the request's
``wire`` and the role contracts, named under ``TYPE_CHECKING`` for annotations). A new format is
a new subpackage under ``proxy/wire/``, not a change to them."""

from __future__ import annotations

import importlib.util
import pkgutil

import pytest

import proxy.guards
import proxy.loop
from tests.support.imports import import_statements

NEUTRAL = [
    "proxy.loop.continuity",
    "proxy.exchange",
    "proxy.loop.inflight",
    "proxy.books.ledger",
    "proxy.loop.pipeline",
    "proxy.verdict",
]
WIRE = "proxy.wire"


def neutral_modules() -> list[str]:
    """Every module of the guards package (found by walking it, so a new guard is covered), and
    the neutral modules named above."""
    guards = [name for _, name, _ in pkgutil.walk_packages(proxy.guards.__path__, "proxy.guards.")]
    return sorted(["proxy.guards", *guards, *NEUTRAL])


def loop_modules() -> list[str]:
    """Every module of the loop package, found by walking it (a new module is covered)."""
    return sorted(["proxy.loop", *(name for _, name, _ in pkgutil.walk_packages(proxy.loop.__path__, "proxy.loop."))])


def imported_modules(source: str, module: str, is_package: bool = False, *, run_time_only: bool = False) -> set[str]:
    """Every module an import statement of ``source`` names; ``from a import b`` names both
    ``a`` and ``a.b`` (b may be a module)."""
    found: set[str] = set()
    for base, names in import_statements(source, module, is_package, run_time_only=run_time_only):
        found.add(base)
        found.update(f"{base}.{name}" for name in names)
    return found


def wire_imports(module: str, *, run_time_only: bool = False) -> list[str]:
    spec = importlib.util.find_spec(module)
    assert spec is not None, module
    assert spec.origin is not None, module
    with open(spec.origin, encoding="utf-8") as source:
        text = source.read()
    names = imported_modules(text, module, spec.submodule_search_locations is not None, run_time_only=run_time_only)
    return sorted(name for name in names if name == WIRE or name.startswith(WIRE + "."))


def test_the_walk_covers_every_guard_module():
    modules = neutral_modules()

    assert {"proxy.guards.base", "proxy.guards.premature_stop", "proxy.guards.tool_args"} <= set(modules)
    assert len([m for m in modules if m.startswith("proxy.guards.")]) >= 12


@pytest.mark.parametrize("module", neutral_modules())
def test_a_neutral_module_imports_nothing_from_the_wire_package(module):
    assert wire_imports(module) == []


def test_the_walk_covers_every_loop_module():
    assert {"proxy.loop.pipeline", "proxy.loop.finalize", "proxy.loop.attempts", "proxy.loop.build"} <= set(
        loop_modules()
    )


@pytest.mark.parametrize("module", loop_modules())
def test_a_loop_module_imports_nothing_from_the_wire_package_at_run_time(module):
    assert wire_imports(module, run_time_only=True) == []


def test_an_import_under_type_checking_is_left_out_of_the_run_time_imports_only():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from proxy.wire.base import WireFormat"

    assert WIRE + ".base" in imported_modules(source, "proxy.loop.example")
    assert imported_modules(source, "proxy.loop.example", run_time_only=True) == {"typing", "typing.TYPE_CHECKING"}


@pytest.mark.parametrize(
    "source",
    [
        "from proxy.wire.chat.format import calls_returned",
        "import proxy.wire.chat.format as chat",
        "from proxy.wire import base",
        "from proxy import wire",
        "from ..wire.chat_stream import ChatAssembler",
        "from .. import wire",
        "def later():\n    from proxy.wire.base import WireFormat",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from proxy.wire.base import WireFormat",
    ],
)
def test_every_spelling_of_a_wire_import_is_caught(source):
    names = imported_modules(source, "proxy.guards.example")

    assert any(name == WIRE or name.startswith(WIRE + ".") for name in names)


def test_imports_of_neutral_modules_are_not_mistaken_for_wire_ones():
    source = "from proxy.exchange import Reply\nimport proxy.wiring\nfrom proxy.guards.base import GuardContext"

    assert not any(n == WIRE or n.startswith(WIRE + ".") for n in imported_modules(source, "proxy.guards.example"))
