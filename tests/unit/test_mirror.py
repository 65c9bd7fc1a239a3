"""tests/unit mirrors proxy/: every module with logic has a test module of its name at the mirrored
path (proxy/edge/tenants.py → tests/unit/edge/test_tenants.py), and every unit test module is
named after the module it tests, but for a few suites that test the whole package.

A module without a test module of its own fails here: write one, or, for a module with no logic
of its own, add it to LOGIC_FREE with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PROXY = ROOT / "proxy"
UNIT = ROOT / "tests" / "unit"

LOGIC_FREE = {
    "__main__.py": "runs cli.main",
    "loop/build.py": "wiring only: builds the pipeline from its parts (every pipeline test runs it)",
    "wire/base.py": "the wire contracts: Protocols, no code",
    "wire/common.py": "the JSON codec and judge every format shares: run by the wire contract suite",
}
"""Modules with no logic of their own, relative to proxy/ (``__init__.py`` files are never asked for)."""

AWAITING_TESTS: dict[str, str] = {}
"""Modules with logic whose tests come with the change rewriting them, which lands beside this one."""

WHOLE_PACKAGE = {
    "test_mirror.py": "this file",
    "test_public_api.py": "the package's exported names",
    "test_readme.py": "the README's examples",
    "test_documented.py": "every command and flag of the command line is documented",
    "test_wire_boundary.py": "no guard or neutral module imports a wire format",
    "test_layers.py": "layers import downward only",
    "test_test_redis.py": "the tests' own Redis servers (tests/support/redis.py)",
    "test_test_timing.py": "the tests' own timing helpers (tests/support/timed.py, waiting.py)",
    "test_test_processes.py": "the tests' own process helpers (tests/support/processes.py)",
    "guards/test_guards_touch_nothing.py": "every guard leaves what it reads untouched",
    "session/test_store_contract.py": "one contract suite over every session store",
    "wire/test_contract.py": "one contract suite over every wire format",
}
"""Unit test modules that test the package as a whole, not one module, relative to tests/unit/."""


def modules() -> list[str]:
    """Every module of proxy/ (relative path), but package ``__init__`` files."""
    return sorted(str(p.relative_to(PROXY)) for p in PROXY.rglob("*.py") if p.name != "__init__.py")


def mirrored(module: str) -> Path:
    """Where the test module of ``module`` sits: its folder under tests/unit, ``test_`` before its name."""
    path = Path(module)
    return UNIT / path.parent / f"test_{path.name}"


def module_under_test(test: Path) -> Path:
    """The proxy module a unit test module is named after (it may not exist)."""
    relative = test.relative_to(UNIT)
    return PROXY / relative.parent / relative.name.removeprefix("test_")


def test_every_module_with_logic_has_a_test_module_at_its_mirrored_path():
    missing = [
        str(mirrored(m).relative_to(ROOT))
        for m in modules()
        if m not in LOGIC_FREE and m not in AWAITING_TESTS and not mirrored(m).is_file()
    ]

    assert missing == [], f"write these test modules (or list their module as logic-free): {', '.join(missing)}"


def test_every_unit_test_module_is_named_after_the_module_it_tests():
    stray = [
        str(test.relative_to(ROOT))
        for test in sorted(UNIT.rglob("test_*.py"))
        if str(test.relative_to(UNIT)) not in WHOLE_PACKAGE and not module_under_test(test).is_file()
    ]

    assert stray == [], f"named after no module of proxy/ (move them to the module they test): {', '.join(stray)}"


@pytest.mark.parametrize("module", sorted({**LOGIC_FREE, **AWAITING_TESTS}))
def test_the_lists_name_modules_that_exist_and_have_no_test_module_yet(module):
    assert (PROXY / module).is_file(), f"proxy/{module} is gone: take it off the list"
    assert not mirrored(module).is_file(), f"proxy/{module} has its test module now: take it off the list"


def test_every_test_folder_is_a_package_so_test_modules_of_one_name_do_not_collide():
    folders = {test.parent for test in UNIT.rglob("test_*.py")}

    assert [str(f.relative_to(ROOT)) for f in sorted(folders) if not (f / "__init__.py").is_file()] == []
