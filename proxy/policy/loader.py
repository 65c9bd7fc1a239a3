"""Load, check and hot-reload the policy files of a directory.

Every ``*.yaml`` in the directory is a policy named after its file (``strict.yaml`` →
``strict``), except ``_``-prefixed files and ``pricing.yaml``. A bad file fails the start
with file and field named; on reload (SIGHUP or a changed file) a bad version is logged
and the previous set stays in force.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from pathlib import Path

import yaml
from pydantic import ValidationError

from proxy.observe.logs import log_event
from proxy.policy.models import Policy

__all__ = [
    "BUNDLED_POLICIES",
    "NOT_POLICIES",
    "PolicyError",
    "PolicyRegistry",
    "load_policies",
    "load_policy_file",
    "policy_files",
]

NOT_POLICIES = frozenset({"pricing.yaml"})

BUNDLED_POLICIES = Path(__file__).parent.parent / "policies"
"""The policies and ``pricing.yaml`` shipped with LoopWarden as package data: the repository's
top-level ``policies/`` (``proxy/policies`` links to it, and the wheel carries its files), so an
installed proxy started anywhere has ``strict``, ``lenient`` and the price table."""


class PolicyError(ValueError):
    """A policy file cannot be used; the message names the file and the field."""


def policy_files(directory: Path) -> list[Path]:
    """The policy files of ``directory``, sorted (pricing and ``_``-prefixed files are not policies)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.yaml") if not p.name.startswith("_") and p.name not in NOT_POLICIES)


def load_policy_file(path: Path) -> Policy:
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyError(f"{path}: cannot read policy: {exc}") from exc
    if not isinstance(raw, dict):
        raise PolicyError(f"{path}: a policy file must be a mapping")
    if "name" in raw:
        raise PolicyError(f"{path}: name: the policy's name is its file name; remove the field")
    try:
        return Policy.model_validate({**raw, "name": path.stem})
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or '(root)'}: {error['msg']}" for error in exc.errors()
        )
        raise PolicyError(f"{path}: {details}") from exc


def load_policies(directory: Path) -> dict[str, Policy]:
    """All policies of ``directory``; the built-in ``default`` when the directory has none."""
    policies = {path.stem: load_policy_file(path) for path in policy_files(directory)}
    policies.setdefault("default", Policy())
    return policies


class PolicyRegistry:
    """The policies in force; replaced whole on a successful reload."""

    def __init__(self, directory: Path, policies: Mapping[str, Policy] | None = None) -> None:
        self.directory = directory
        self._policies = dict(policies) if policies is not None else load_policies(directory)
        self._stamp = self._fingerprint()

    def get(self, name: str) -> Policy | None:
        return self._policies.get(name)

    @property
    def names(self) -> list[str]:
        return sorted(self._policies)

    def reload(self) -> bool:
        """Load the directory again; keep the old set (and log why) when the new one is bad."""
        self._stamp = self._fingerprint()
        try:
            fresh = load_policies(self.directory)
        except PolicyError as exc:
            log_event("policy_reload_rejected", {"error": str(exc)}, logging.ERROR)
            return False
        self._policies = fresh
        log_event("policy_reloaded", {"policies": sorted(fresh)})
        return True

    def changed_on_disk(self) -> bool:
        return self._fingerprint() != self._stamp

    def _fingerprint(self) -> tuple[tuple[str, int, int], ...]:
        stamps = []
        for path in policy_files(self.directory):
            try:
                stat = path.stat()
            except OSError:
                continue
            stamps.append((path.name, stat.st_mtime_ns, stat.st_size))
        return tuple(stamps)

    async def watch(self, interval: float) -> None:
        """Reload whenever a policy file changes; runs until cancelled."""
        while True:
            await asyncio.sleep(interval)
            if self.changed_on_disk():
                self.reload()
