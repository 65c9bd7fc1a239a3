"""Tenants for the tests: tenants files (each tenant named with its proxy key, stored hashed as
the file wants it, its upstream key read from ``PROVIDER_KEY``, which the test sets), and
tenants built in code for tests that need a tenant directory without a file."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.edge.tenants import Tenant, hash_key

PROVIDER_KEY = "sk-provider-" + "9" * 20
"""What the tests put in ``PROVIDER_KEY``: the tenants' own provider key."""


def tenants_yaml(keys: Mapping[str, str], fields: Mapping[str, str] | None = None) -> str:
    """A tenants file with one tenant per name in ``keys`` (name: proxy key); ``fields``: a
    tenant's further fields by its name, YAML lines (``"daily_tokens: 1000"``)."""
    more = fields or {}
    return "tenants:\n" + "".join(
        f"  - name: {name}\n    key_sha256: ['{hash_key(key)}']\n    upstream: {{api_key_env: PROVIDER_KEY}}\n"
        + "".join(f"    {line}\n" for line in more.get(name, "").splitlines())
        for name, key in keys.items()
    )


def keyed_tenant(name: str) -> Tenant:
    """A tenant whose own provider key is sent upstream (its callers send only its key)."""
    return Tenant(
        name=name,
        upstream_url="http://upstream.invalid/v1",
        upstream_authorization=f"Bearer sk-{name}",
        forward_client_key=False,
        policies=("default",),
        default_policy="default",
    )
