"""Client regexes on the bounded engine: per-match bound, shared budget, compile-size screen,
and every place jsonschema runs a schema's pattern handed to it."""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import jsonschema
import pytest

from proxy.schemas import patterns
from proxy.schemas.patterns import BOUNDED_RE, PATCHED_MODULES, PatternUnchecked, budget, compile_pattern, search

CATASTROPHIC = r"^(a|a)*$"
"""Backtracks 2^n times on n letters and a mismatch, on both engines."""
HOSTILE = "a" * 40 + "!"


def test_an_ordinary_pattern_matches_as_re_would():
    assert search(r"^\d{4}-\d{2}-\d{2}$", "2026-11-30") is not None
    assert search(r"^\d{4}-\d{2}-\d{2}$", "30/11/2026") is None


def test_a_catastrophic_match_is_cut_off_at_the_per_match_bound():
    with pytest.raises(PatternUnchecked, match="matching took longer than 20 ms"):
        search(CATASTROPHIC, HOSTILE)


def test_matches_inside_a_budget_share_it():
    with budget(0.0), pytest.raises(PatternUnchecked, match="the time for checking patterns ran out"):
        search("^a$", "a")


def test_a_pattern_that_does_not_compile_cannot_check_anything():
    with pytest.raises(PatternUnchecked, match="does not compile"):
        search("(unclosed", "x")


@pytest.mark.parametrize(
    "pattern",
    ["(((a{100}){100}){100}){100}", "a{1000000}", "(?:x{5000}){20}", r"(\p{L}{1000}){1000}"],
    ids=["nested", "single", "group", "regex-only-syntax"],
)
def test_a_pattern_that_would_unroll_past_the_limit_is_refused_before_compiling(pattern):
    with pytest.raises(re.error, match="unroll"):
        compile_pattern(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
        r"^[a-z]{1,64}@[a-z]{1,255}\.[a-z]{2,63}$",
        r"^.{0,100000}$",
        r"^\p{Lu}\p{Ll}+$",
    ],
)
def test_everyday_patterns_compile(pattern):
    assert compile_pattern(pattern) is not None


def test_every_jsonschema_module_that_runs_patterns_gets_the_bounded_engine():
    """A jsonschema upgrade that runs ``re`` somewhere new fails here, not in production."""
    runs_patterns = set()
    root = Path(jsonschema.__file__).parent
    for module in pkgutil.walk_packages(jsonschema.__path__, "jsonschema."):
        if ".tests" in module.name or ".benchmarks" in module.name:
            continue
        path = root.joinpath(*module.name.split(".")[1:])
        source = (path / "__init__.py" if path.is_dir() else path.with_suffix(".py")).read_text()
        if re.search(r"\bre\.(search|match|fullmatch|compile)\((?!r?[\"'])", source):
            runs_patterns.add(module.name)

    assert runs_patterns == set(PATCHED_MODULES)
    for name in PATCHED_MODULES:
        assert importlib.import_module(name).re is BOUNDED_RE


def test_install_is_idempotent():
    patterns.install()

    assert importlib.import_module("jsonschema._keywords").re is BOUNDED_RE
