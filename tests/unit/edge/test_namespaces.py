"""Session namespaces: a caller's derived from its key, recognised by their shape."""

from __future__ import annotations

import pytest

from proxy.edge.namespaces import bearer, caller_namespace, is_caller_namespace


@pytest.mark.parametrize(
    ("namespace", "is_one"),
    [
        pytest.param(caller_namespace("default", "Bearer sk-a"), True, id="a-callers"),
        pytest.param("default", True, id="the-bare-tenant"),
        pytest.param(caller_namespace("other", "Bearer sk-a"), False, id="another-tenants"),
        pytest.param("default~" + "g" * 32, False, id="not-hex"),
        pytest.param("default~abc", False, id="too-short"),
        pytest.param("default~" + "a" * 32 + ":x", False, id="with-a-colon"),
    ],
)
def test_a_caller_namespace_is_recognised_by_its_shape(namespace, is_one):
    assert is_caller_namespace("default", namespace) is is_one


def test_two_keys_never_share_a_namespace():
    assert caller_namespace("default", "Bearer sk-a") != caller_namespace("default", "Bearer sk-b")


def test_the_bearer_scheme_is_read_in_any_case_and_one_caller():
    assert caller_namespace("default", "bearer sk-a") == caller_namespace("default", "Bearer sk-a")


def test_a_namespace_never_holds_the_key():
    assert "sk-secret" not in caller_namespace("default", "Bearer sk-secret")


@pytest.mark.parametrize(
    ("authorization", "token"),
    [("Bearer sk-a", "sk-a"), ("bearer  sk-a ", "sk-a"), ("Basic abc", None), ("Bearer ", None), (None, None)],
)
def test_the_bearer_token_is_read_from_the_header(authorization, token):
    assert bearer(authorization) == token
