"""Policies: what the guards do for a tenant, loaded from YAML and checked at start."""

from proxy.policy.loader import PolicyError, PolicyRegistry, load_policies
from proxy.policy.models import Policy

__all__ = ["Policy", "PolicyError", "PolicyRegistry", "load_policies"]
