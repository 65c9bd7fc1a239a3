"""Tenants built in code, for tests that need a tenant directory without a tenants file."""

from __future__ import annotations

from proxy.edge.tenants import Tenant


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
