"""Liveness and readiness."""

from __future__ import annotations

import httpx


def test_healthz_answers_ok(proxy):
    response = httpx.get(f"{proxy.url}/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_is_ready_once_started(proxy):
    response = httpx.get(f"{proxy.url}/readyz")

    assert (response.status_code, response.json()) == (200, {"status": "ready"})


def test_readyz_is_503_while_draining(proxy):
    proxy.readiness.draining = True

    response = httpx.get(f"{proxy.url}/readyz")

    assert (response.status_code, response.json()) == (503, {"status": "draining"})


def test_health_routes_need_no_key_and_never_reach_upstream(proxy, upstream):
    httpx.get(f"{proxy.url}/healthz")
    httpx.get(f"{proxy.url}/readyz")

    assert upstream.requests == []
