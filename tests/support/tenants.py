"""Tenants files for the tests: each tenant named with its proxy key (stored hashed, as the
file wants it), its upstream key read from ``PROVIDER_KEY`` (the test sets that variable)."""

from __future__ import annotations

from collections.abc import Mapping

from proxy.edge.tenants import hash_key

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
