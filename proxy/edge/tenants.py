"""Tenants: who is calling, which upstream they reach, with which credentials.

The tenants file stores proxy keys only as SHA-256 hex digests. A presented key is hashed
and looked up; the match is then confirmed with ``hmac.compare_digest``, so the time taken
never depends on how much of a stored digest a guess got right. A proxy key is never
forwarded upstream and never logged.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from proxy.edge.namespaces import bearer, caller_namespace
from proxy.errors import AuthenticationFailed, PermissionDenied
from proxy.upstream.addresses import blocked_reason
from proxy.upstream.paths import OTHER_FAMILY, PASSTHROUGH_FAMILIES

__all__ = [
    "API_KEY_HEADERS",
    "KEY_HEADER",
    "Tenant",
    "TenantDirectory",
    "TenantsFileError",
    "hash_key",
    "load_tenants",
]

KEY_HEADER = "x-loopwarden-key"
"""Carries the proxy key when ``Authorization`` carries the client's own provider key."""
API_KEY_HEADERS = ("api-key", "x-api-key", "x-goog-api-key")
"""Where clients without ``Authorization`` send their provider key (Azure's SDK, Anthropic's,
Google's): without a tenants file, what tells those callers apart."""


class TenantsFileError(ValueError):
    """The tenants file cannot be used; the message names the file and the field."""


def hash_key(key: str) -> str:
    """SHA-256 hex of a proxy key: the only form in which keys are stored."""
    return hashlib.sha256(key.encode()).hexdigest()


def check_upstream_url(url: str) -> str:
    """Reject what no model API is: non-HTTP schemes, link-local and cloud metadata hosts,
    in whatever notation the address is written (see :mod:`proxy.upstream.addresses`)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"upstream base_url must be an http(s) URL with a host, got {url!r}")
    reason = blocked_reason(parts.hostname)
    if reason is not None:
        raise ValueError(reason)
    if parts.path.rstrip("/").lower().endswith("/v1/v1"):
        raise ValueError(f"upstream base_url {url!r} ends in /v1/v1: give the API's base once (…/v1)")
    return url.rstrip("/")


class UpstreamSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str | None = Field(None, description="Model API base URL; defaults to the global --upstream.")
    api_key_env: str | None = Field(None, description="Environment variable holding the provider key.")
    forward_client_key: bool = Field(
        False, description="Bring your own key: forward the client's Authorization upstream."
    )

    @field_validator("base_url")
    @classmethod
    def _valid_url(cls, value: str | None) -> str | None:
        return check_upstream_url(value) if value is not None else None

    @field_validator("api_key_env")
    @classmethod
    def _set_in_the_environment(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Checked with the rest of the file (``env`` in the validation's context), so a missing
        variable is reported beside every other problem, not after they are fixed."""
        env = (info.context or {}).get("env")
        if value and env is not None and not env.get(value):
            raise ValueError(f"environment variable {value} is not set")
        return value

    @model_validator(mode="after")
    def _one_credential_source(self) -> UpstreamSpec:
        if bool(self.api_key_env) == self.forward_client_key:
            raise ValueError("set exactly one of api_key_env and forward_client_key")
        return self


def _hex_digest(value: str, what: str) -> str:
    if len(value) != 64 or any(c not in "0123456789abcdef" for c in value.lower()):
        raise ValueError(f"{what} must be 64 hex characters (sha256 of the key)")
    return value.lower()


class TenantSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    key_sha256: list[str] = Field(min_length=1, description="SHA-256 hex digests of the proxy keys.")
    admin_key_sha256: str | None = Field(
        None,
        description="SHA-256 hex digest of the tenant's admin key: it reads and resets every session of the "
        "tenant through the sessions API, and proxies no model call.",
    )
    upstream: UpstreamSpec
    policies: list[str] = Field(default_factory=lambda: ["default"], min_length=1)
    default_policy: str | None = None
    daily_tokens: int | None = Field(None, ge=1, description="Tokens per rolling day, all sessions together.")
    daily_cost_usd: float | None = Field(None, gt=0, description="Cost per rolling day, all sessions together.")
    passthrough: list[str] | None = Field(
        None,
        description="The /v1 pass-through families this tenant may use (e.g. [models, embeddings]; `other` for "
        "families outside the known set); every family when unset, none when empty.",
    )
    forward_telemetry: bool | None = Field(
        None,
        description="Forward Claude Code's telemetry to the upstream host; unset: as --forward-telemetry says "
        "(by default only for a base URL that is the API's own /v1).",
    )

    @field_validator("passthrough")
    @classmethod
    def _known_families(cls, values: list[str] | None) -> list[str] | None:
        known = PASSTHROUGH_FAMILIES | {OTHER_FAMILY}
        unknown = sorted(set(values or ()) - known)
        if unknown:
            raise ValueError(f"unknown pass-through families {unknown}; known: {sorted(known)}")
        return values

    @field_validator("key_sha256")
    @classmethod
    def _hex_digests(cls, values: list[str]) -> list[str]:
        return [_hex_digest(value, "each key_sha256 entry") for value in values]

    @field_validator("admin_key_sha256")
    @classmethod
    def _admin_digest(cls, value: str | None) -> str | None:
        return None if value is None else _hex_digest(value, "admin_key_sha256")

    @model_validator(mode="after")
    def _default_is_allowed(self) -> TenantSpec:
        if self.default_policy is not None and self.default_policy not in self.policies:
            raise ValueError(f"default_policy {self.default_policy!r} is not among policies")
        return self

    @model_validator(mode="after")
    def _has_an_upstream(self, info: ValidationInfo) -> TenantSpec:
        context = info.context or {}
        if self.upstream.base_url is None and "default_upstream" in context and not context["default_upstream"]:
            raise ValueError("upstream.base_url: missing and no --upstream given")
        return self


class TenantsFile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tenants: list[TenantSpec] = Field(min_length=1)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A resolved tenant: everything a request needs, computed once at load."""

    name: str
    upstream_url: str
    upstream_authorization: str | None
    """``Bearer <key>`` read from the environment, or None to forward the client's own."""
    forward_client_key: bool
    policies: tuple[str, ...]
    default_policy: str
    daily_tokens: int | None = None
    daily_cost_usd: float | None = None
    any_policy: bool = False
    """The implicit tenant (no tenants file) may use every policy of the directory."""
    passthrough: frozenset[str] | None = None
    """The pass-through families this tenant may use; None: all of them."""
    forward_telemetry: bool | None = None
    """Forward Claude Code's telemetry upstream; None: as the process's setting says."""
    admin_key_sha256: str | None = None
    """The digest of the key that may use the sessions API on every session of this tenant."""

    def choose_policy(self, requested: str | None) -> str:
        """The policy for one request: the tenant's default unless it asked for an allowed one."""
        if requested is None or requested == self.default_policy:
            return self.default_policy
        if not self.any_policy and requested not in self.policies:
            raise PermissionDenied(f"policy {requested!r} is not allowed for this API key", param="policy")
        return requested

    def check_family(self, family: str) -> None:
        """403 for a pass-through family this tenant's allow-list does not name."""
        if self.passthrough is not None and family not in self.passthrough:
            allowed = ", ".join(sorted(self.passthrough)) or "none"
            raise PermissionDenied(
                f"The pass-through family {family!r} is not allowed for this API key (allowed: {allowed})."
            )


@dataclass(frozen=True, slots=True)
class Credentials:
    """Who the caller is and what goes upstream in ``Authorization``."""

    tenant: Tenant
    upstream_authorization: str | None
    namespace: str
    """What the caller's sessions are namespaced by: the tenant's name, or without a tenants
    file a digest of the caller's ``Authorization`` (see :func:`caller_namespace`)."""
    admin: bool = False
    """Authenticated by the tenant's admin key (the sessions API only)."""


_UNIFORM_401 = "Invalid or missing API key for this proxy."


class TenantDirectory:
    """Authenticates requests. Without a tenants file, one open tenant forwards the client's key."""

    def __init__(
        self,
        tenants: Mapping[str, Tenant] | None,
        open_tenant: Tenant | None = None,
        admins: Mapping[str, Tenant] | None = None,
    ) -> None:
        self._by_digest = {digest: (digest, tenant) for digest, tenant in (tenants or {}).items()}
        self._admins = {digest: (digest, tenant) for digest, tenant in (admins or {}).items()}
        self._open = open_tenant

    @classmethod
    def open(cls, upstream: str) -> TenantDirectory:
        tenant = Tenant(
            name="default",
            upstream_url=check_upstream_url(upstream),
            upstream_authorization=None,
            forward_client_key=True,
            policies=("default",),
            default_policy="default",
            any_policy=True,
        )
        return cls(None, tenant)

    @property
    def is_open(self) -> bool:
        """No tenants file: one open tenant, each caller's sessions in a namespace of its own."""
        return self._open is not None

    @property
    def tenants(self) -> list[Tenant]:
        seen = {tenant.name: tenant for _, tenant in self._by_digest.values()}
        if self._open is not None:
            seen[self._open.name] = self._open
        return list(seen.values())

    def admin(self, presented: str | None) -> Tenant | None:
        """The tenant whose admin key was presented, or None; looked up by digest and confirmed
        in constant time, as tenant keys are."""
        if not presented or not self._admins:
            return None
        digest = hash_key(presented)
        entry = self._admins.get(digest)
        return entry[1] if entry is not None and hmac.compare_digest(entry[0], digest) else None

    def authenticate(
        self, authorization: str | None, proxy_key: str | None, *, identified: bool = False, api_key: str | None = None
    ) -> Credentials:
        """Resolve the caller; every failure is the same 401 so nothing is learned by probing.

        ``api_key``: the first of :data:`API_KEY_HEADERS` the caller sent, which identifies a
        caller of the implicit tenant without ``Authorization``. ``identified`` (the sessions
        API) also refuses a caller of the implicit tenant who sends neither: its sessions
        belong to nobody in particular."""
        if self._open is not None:
            caller = authorization if (authorization or "").strip() else api_key
            if identified and not (caller or "").strip():
                raise AuthenticationFailed(
                    "The sessions API needs the Authorization (or api-key) header the session's requests "
                    "were sent with."
                )
            return Credentials(self._open, authorization, caller_namespace(self._open.name, caller))
        client_key = bearer(authorization) or (api_key.strip() if api_key else None)
        presented = proxy_key if proxy_key is not None else client_key
        if not presented:
            raise AuthenticationFailed(_UNIFORM_401)
        digest = hash_key(presented)
        entry = self._by_digest.get(digest)
        # The lookup compares SHA-256 digests, never the key itself: timing it reveals at most
        # a prefix of a digest, which leads nowhere. The stored digest is then confirmed with a
        # constant-time comparison.
        if entry is None and identified:
            admin = self._admins.get(digest)
            if admin is not None and hmac.compare_digest(admin[0], digest):
                return Credentials(admin[1], None, admin[1].name, admin=True)
        if entry is None or not hmac.compare_digest(entry[0], digest):
            raise AuthenticationFailed(_UNIFORM_401)
        tenant = entry[1]
        if tenant.forward_client_key:
            if proxy_key is None:
                raise AuthenticationFailed(
                    f"This tenant brings its own provider key: send the proxy key in {KEY_HEADER} "
                    "and the provider key in Authorization."
                )
            return Credentials(tenant, authorization, tenant.name)
        return Credentials(tenant, tenant.upstream_authorization, tenant.name)


def load_tenants(path: Path, default_upstream: str | None, environ: Mapping[str, str] | None = None) -> TenantDirectory:
    """Load and check the tenants file; every problem in it is reported at once, each naming
    the file, the tenant and the field (not one per start)."""
    env = os.environ if environ is None else environ
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise TenantsFileError(f"{path}: cannot read tenants file: {exc}") from exc
    problems: list[str] = []
    by_digest: dict[str, Tenant] = {}
    admins: dict[str, Tenant] = {}
    names: set[str] = set()
    context: dict[str, object] = {"env": env, "default_upstream": default_upstream}
    for index, spec in _valid_specs(raw, context, problems):
        where = _where(index, spec.name)
        if spec.name in names:
            problems.append(f"{where}.name: duplicate tenant name")
            continue
        names.add(spec.name)
        tenant = _tenant(spec, where, default_upstream, env, problems)
        keys = [(digest, "key_sha256", by_digest) for digest in spec.key_sha256]
        if spec.admin_key_sha256 is not None:
            keys.append((spec.admin_key_sha256, "admin_key_sha256", admins))
        for digest, field_name, into in keys:
            owner = by_digest.get(digest) or admins.get(digest)
            if owner is not None:  # one key, one role: a proxy key is never also an admin key
                problems.append(f"{where}.{field_name}: key already belongs to {owner.name}")
            elif tenant is not None:
                into[digest] = tenant
    if problems:
        listed = (
            problems[0]
            if len(problems) == 1
            else f"{len(problems)} problems:\n" + "\n".join(f"  - {problem}" for problem in problems)
        )
        raise TenantsFileError(f"{path}: {listed}")
    return TenantDirectory(by_digest, admins=admins)


def _valid_specs(raw: object, context: dict[str, object], problems: list[str]) -> list[tuple[int, TenantSpec]]:
    """The tenants that validate, by position; what does not is added to ``problems`` (every
    field of every tenant, as one validation of the whole file finds them)."""
    try:
        return list(enumerate(TenantsFile.model_validate(raw, context=context).tenants))
    except ValidationError as exc:
        items = raw.get("tenants") if isinstance(raw, dict) else None
        listed = items if isinstance(items, list) else []
        for error in exc.errors():
            problems.append(f"{_location(error['loc'], listed)}: {error['msg']}")
    valid = []
    for index, item in enumerate(listed):
        with contextlib.suppress(ValidationError):  # reported above
            valid.append((index, TenantSpec.model_validate(item, context=context)))
    return valid


def _where(index: int, name: object) -> str:
    return f"tenants[{index}] ({name})" if isinstance(name, str) else f"tenants[{index}]"


def _location(loc: tuple[int | str, ...], items: list[object]) -> str:
    """``("tenants", 0, "upstream", "base_url")`` → ``tenants[0] (acme).upstream.base_url``."""
    if len(loc) >= 2 and loc[0] == "tenants" and isinstance(loc[1], int) and loc[1] < len(items):
        item = items[loc[1]]
        where = _where(loc[1], item.get("name") if isinstance(item, dict) else None)
        return ".".join([where, *(str(part) for part in loc[2:])])
    return ".".join(str(part) for part in loc) or "(root)"


def _tenant(
    spec: TenantSpec, where: str, default_upstream: str | None, env: Mapping[str, str], problems: list[str]
) -> Tenant | None:
    """The tenant ``spec`` describes, or None after adding what is wrong with it to ``problems``."""
    base_url = spec.upstream.base_url or default_upstream
    try:
        base_url = check_upstream_url(base_url or "")  # the tenant's own is checked already, --upstream is not
    except ValueError as exc:
        problems.append(f"{where}.upstream.base_url (--upstream): {exc}")
        return None
    key_env = spec.upstream.api_key_env
    authorization = f"Bearer {env[key_env]}" if key_env else None  # validated: it is set
    return Tenant(
        name=spec.name,
        upstream_url=base_url,
        upstream_authorization=authorization,
        forward_client_key=spec.upstream.forward_client_key,
        policies=tuple(spec.policies),
        default_policy=spec.default_policy or spec.policies[0],
        daily_tokens=spec.daily_tokens,
        daily_cost_usd=spec.daily_cost_usd,
        passthrough=None if spec.passthrough is None else frozenset(spec.passthrough),
        forward_telemetry=spec.forward_telemetry,
        admin_key_sha256=spec.admin_key_sha256,
    )
