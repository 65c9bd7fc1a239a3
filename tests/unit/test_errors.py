"""One hierarchy of errors, each with its HTTP status, OpenAI error type and code, rendered in
one envelope; the tree drawn in the module's docstring is the tree of its classes."""

from __future__ import annotations

import json
import re

import pytest

import proxy.errors as errors
from proxy.errors import (
    InvalidRequest,
    ProxyError,
    RateLimited,
    UpstreamError,
    UpstreamTimeout,
    error_body,
)

DRAWN = re.compile(r"^\s*(?:[│ ]*[├└]── )?(\w+)\s+(\d{3}) (\w+)(?: / (\w+))?$")


def drawn_tree() -> list[tuple[int, str, int, str, str | None]]:
    """(depth, class, status, type, code) for every line of the docstring's drawing."""
    rows = []
    for line in (errors.__doc__ or "").splitlines():
        match = DRAWN.match(line)
        if match:
            depth = 0 if "──" not in line else line.index("──") // 4
            name, status, type_, code = match.groups()
            rows.append((depth, name, int(status), type_, code))
    return rows


def test_the_drawing_names_every_error_class():
    assert sorted(name for _, name, *_ in drawn_tree()) == sorted(
        name for name in errors.__all__ if isinstance(getattr(errors, name), type)
    )


@pytest.mark.parametrize(("depth", "name", "status", "type_", "code"), drawn_tree(), ids=lambda v: str(v))
def test_each_class_has_the_status_type_and_code_drawn(depth, name, status, type_, code):
    cls = getattr(errors, name)

    assert (cls.status, cls.type) == (status, type_)
    if code is not None:
        assert cls.code == code


def test_each_class_sits_under_the_parent_drawn_above_it():
    parents: list[str] = []
    for depth, name, *_ in drawn_tree():
        parents[depth:] = [name]
        if depth:
            assert getattr(errors, name).__mro__[1] is getattr(errors, parents[depth - 1])


def test_an_error_renders_the_openai_envelope_with_all_four_fields():
    body = json.loads(InvalidRequest("tools[0]: bad.", param="tools[0]").body())

    assert body == {
        "error": {"message": "tools[0]: bad.", "type": "invalid_request_error", "param": "tools[0]", "code": None}
    }


def test_a_subclass_inherits_its_parents_status_unless_it_sets_its_own():
    assert (UpstreamError.status, UpstreamTimeout.status) == (502, 504)
    assert UpstreamTimeout.type == UpstreamError.type


def test_headers_default_to_none_and_are_carried_when_given():
    assert ProxyError("x").headers == {}
    assert RateLimited("later", headers={"retry-after": "30"}).headers == {"retry-after": "30"}


def test_the_envelope_escapes_what_it_carries():
    assert json.loads(error_body('say "hi"\n', "t", "c"))["error"]["message"] == 'say "hi"\n'
