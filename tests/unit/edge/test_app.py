"""What a started proxy asks of the cyclic garbage collector, and what /readyz says when the store is down."""

from __future__ import annotations

import gc

import pytest
from litestar.testing import TestClient

from proxy.edge.app import YOUNG_GC_THRESHOLD, create_app
from proxy.settings import Settings


def test_a_started_proxy_collects_young_objects_only_after_ten_thousand_net_allocations():
    before = gc.get_threshold()
    try:
        with TestClient(create_app(Settings(upstream="http://127.0.0.1:9/v1"))) as client:
            assert client.get("/healthz").status_code == 200

            assert gc.get_threshold() == (YOUNG_GC_THRESHOLD, *before[1:])
            assert gc.get_freeze_count() > 0  # what startup built is out of every collection
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


@pytest.mark.parametrize(
    ("modes", "says"),
    [
        (
            {"default": "open", "strict": "closed", "tight": "closed"},
            "the session state store does not answer (ConnectionError); requests under the policies that fail "
            "closed (strict, tight) get 503 until it answers; the others are served guarded only by what each "
            "request shows (X-LoopWarden-Degraded)",
        ),
        (
            {"default": "open"},
            "the session state store does not answer (ConnectionError); requests are served guarded only by what "
            "each request shows (X-LoopWarden-Degraded)",
        ),
    ],
    ids=["some-fail-closed", "all-fail-open"],
)
def test_readiness_says_why_it_fails_and_what_requests_get_meanwhile(modes, says, tmp_path):
    from proxy.edge.app import _unready_reason
    from proxy.policy.loader import PolicyRegistry
    from proxy.policy.models import Policy
    from proxy.session.base import StoreUnavailable

    registry = PolicyRegistry(tmp_path, {name: Policy(state_fail_mode=mode) for name, mode in modes.items()})
    failed = StoreUnavailable("ping failed at Redis at 10.0.0.5:6379")
    failed.__cause__ = ConnectionError("refused")

    assert _unready_reason(failed, registry) == says


def test_every_tenant_naming_policies_that_do_not_exist_is_named_at_once(tmp_path, monkeypatch):
    from proxy.edge.tenants import hash_key
    from proxy.policy.loader import PolicyError

    monkeypatch.setenv("PROVIDER_KEY", "sk-p")
    tenants = tmp_path / "tenants.yaml"
    tenants.write_text(
        "tenants:\n"
        + "".join(
            f"  - {{name: {name}, key_sha256: ['{hash_key(name)}'], upstream: {{api_key_env: PROVIDER_KEY}}, "
            f"policies: {policies}}}\n"
            for name, policies in [("acme", "[default, tight]"), ("beta", "[default]"), ("gamma", "[loose]")]
        )
    )

    with pytest.raises(PolicyError) as refused:
        create_app(Settings(upstream="http://127.0.0.1:9/v1", tenants_file=tenants))

    assert str(refused.value).endswith(": tenant 'acme': ['tight']; tenant 'gamma': ['loose']")
