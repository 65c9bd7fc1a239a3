"""Process settings: one frozen model fed by ``LOOPWARDEN_*`` variables and CLI flags.

Each field is a flag (``--read-timeout``) and a variable (``LOOPWARDEN_READ_TIMEOUT``);
the CLI derives its flags from this model, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = ["Settings"]

MiB = 1024 * 1024


class Settings(BaseSettings):
    """Everything the process needs to start; tenants and policies live in their own files."""

    model_config = SettingsConfigDict(env_prefix="LOOPWARDEN_", frozen=True, extra="forbid")

    host: str = Field("127.0.0.1", description="Address to listen on.")
    port: int = Field(8080, ge=0, le=65535, description="Port to listen on (0 picks a free one).")
    metrics_host: str = Field(
        "127.0.0.1",
        description="Address of the metrics listener (/metrics names every tenant's usage: keep it off the API "
        "address; 0.0.0.0 where Prometheus scrapes the pod).",
    )
    metrics_port: int = Field(
        9464, ge=0, le=65535, description="Port of the metrics listener, never the API port (0 picks a free one)."
    )
    console_admin_key_sha256: str | None = Field(
        None,
        description="SHA-256 hex digest of the console's admin key: signed in with it, the console on the metrics "
        "listener shows every tenant's sessions and counts (`loopwarden hash-key` makes the digest).",
    )
    console_secret: SecretStr | None = Field(
        None,
        description="A secret (at least 32 characters) shared by every process serving the console behind one "
        "address: `--reuse-port` workers, a chart's replicas. A browser signed in on one is then signed in on all. "
        "Without it each process makes its own at start (sign-ins are per process; a restart signs everyone out).",
    )
    console_cookie_secure: bool = Field(
        False,
        description="Send the console's sign-in cookie `Secure` always (it is whenever the sign-in came over HTTPS, "
        "directly or as `X-Forwarded-Proto: https` says).",
    )
    reuse_port: bool = Field(
        False,
        description="Bind the API and metrics ports with SO_REUSEPORT, so several `loopwarden serve` processes "
        "share them and the kernel spreads connections across them (with --redis-url and PROMETHEUS_MULTIPROC_DIR).",
    )
    upstream: str | None = Field(
        None,
        description="Base URL of the model API, e.g. https://api.openai.com/v1. "
        "Required unless every tenant in the tenants file names its own.",
    )
    tenants_file: Path | None = Field(
        None, description="YAML tenants file; without it one tenant, `default`, forwards the client's key."
    )
    forward_telemetry: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Forward Claude Code's telemetry (POST /api/event_logging/batch and its v2) to the upstream's "
        "host: auto only where the base URL is the API's own /v1; off answers it locally. "
        "A tenant's forward_telemetry wins.",
    )
    policies_dir: Path | None = Field(
        None,
        description="Directory of policy YAML files and pricing.yaml (default: the ones shipped with LoopWarden; "
        "a directory without pricing.yaml uses the shipped prices).",
    )
    policy_reload_interval: float = Field(
        2.0, ge=0, description="Seconds between checks for changed policy files (0 = only on SIGHUP)."
    )
    redis_url: str | None = Field(
        None, description="Redis URL for session state shared by replicas; in-process memory when unset."
    )
    redis_timeout: float = Field(
        1.0, gt=0, description="Seconds for a Redis connect, command, or wait for a pooled connection."
    )
    redis_max_connections: int = Field(128, gt=0, description="Redis connection pool size per process.")
    redis_cluster: bool = Field(False, description="The Redis URL points at a Redis Cluster node.")
    memory_sessions_per_tenant: int = Field(
        50_000,
        ge=1,
        description="Without Redis: live sessions kept in memory per tenant; over it the least recently used "
        "is dropped (loopwarden_sessions_evicted_total).",
    )
    timeline_events: int = Field(
        500,
        ge=1,
        description="Events kept in each session's timeline; over it the oldest go (counted in the session and "
        "in loopwarden_timeline_dropped_total).",
    )
    listed_sessions: int = Field(
        10_000,
        ge=1,
        description="Sessions the sessions list keeps per tenant (per caller without a tenants file); over it "
        "the least recently seen leave the list (their state stays until it expires).",
    )
    otel_endpoint: str | None = Field(
        None,
        description="OTLP/HTTP traces endpoint (e.g. http://collector:4318/v1/traces); tracing is off without it. "
        "Needs pip install 'loopwarden[otel]'.",
    )
    log_contents: bool = Field(
        False,
        description="Debug only: log message contents in step lines (keys redacted). Off by default.",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    connect_timeout: float = Field(10.0, gt=0, description="Seconds to open a connection upstream.")
    read_timeout: float = Field(
        300.0, gt=0, description="Seconds to wait for the upstream's next bytes (headers or a chunk)."
    )
    stream_keepalive_secs: float = Field(
        15.0,
        ge=0,
        description="While a guarded stream holds everything back (a tool call being checked, the judge), "
        "an SSE comment goes to the client this often (0 = never).",
    )
    pool_timeout: float = Field(
        10.0, gt=0, description="Seconds to wait for a free upstream connection when the pool is full."
    )
    total_timeout: float = Field(
        600.0, gt=0, description="Deadline in seconds for one client request upstream, retries included."
    )
    header_timeout: float = Field(
        10.0,
        ge=0,
        description="Seconds a client has to send a request's headers, from connecting or from the request's "
        "first byte; a slower client's connection is closed (0 = no limit).",
    )
    max_body_bytes: int = Field(
        10 * MiB, gt=0, description="Largest request body accepted (413 above), and WebSocket message (closed 1009)."
    )
    socket_idle_timeout: float = Field(
        300.0,
        ge=0,
        description="Seconds a Responses WebSocket may stay open with no event and no response in flight; "
        "then it is closed with 1000 (0 = no limit).",
    )
    upstream_websocket: Literal["auto", "off"] = Field(
        "auto",
        description="A client's Responses WebSocket goes upstream over a WebSocket of its own (auto), so the "
        "upstream keeps store=false chains on it; an upstream that refuses the upgrade is served over HTTP "
        "(logged once). off: always HTTP, the proxy carrying the chains.",
    )
    max_reply_bytes: int = Field(
        64 * MiB,
        gt=0,
        description="Largest upstream reply to a guarded call, in bytes as received (a stream's events counted "
        "whole): the proxy holds a guarded reply until its verdict, so a longer one is ended (a stream with an "
        "error event in its format, a whole reply with 502 upstream_reply_too_large). Pass-through relays are "
        "not bounded.",
    )
    max_schema_bytes: int = Field(
        256 * 1024,
        gt=0,
        description="Largest JSON Schema a request may carry, per tool and for response_format, in bytes of JSON "
        "(400 above).",
    )
    max_schema_properties: int = Field(
        5000, gt=0, description="Most properties one request schema may declare, all levels counted (400 above)."
    )
    schema_cache_bytes: int = Field(
        16 * MiB, gt=0, description="Compiled request schemas kept, by the bytes of their JSON (oldest dropped first)."
    )
    max_upstream_connections: int = Field(256, gt=0, description="Upstream connection pool size.")
    retry_attempts: int = Field(
        3, ge=1, le=10, description="Upstream attempts per request for transient faults (1 = no retry)."
    )
    retry_base_delay: float = Field(0.5, ge=0, description="First backoff step in seconds (full jitter).")
    retry_max_delay: float = Field(8.0, ge=0, description="Largest backoff step in seconds.")
    retry_after_cap: float = Field(
        20.0,
        ge=0,
        description="Seconds of waiting the upstream asks for (Retry-After, retry-after-ms) that the proxy waits "
        "out itself per request, all waits added up (within total_timeout); past it the answer and its "
        "Retry-After go to the client.",
    )
    retry_after_attempts: int = Field(
        10,
        ge=1,
        le=30,
        description="Upstream attempts per request while the upstream says how long to wait (a 429 storm with "
        "Retry-After); retry_after_cap bounds the waits.",
    )
    retry_budget: float = Field(
        0.2,
        ge=0,
        le=10,
        description="Retries may be at most this share of requests (a token bucket), so a failing upstream "
        "is not hit harder.",
    )
    retry_after_send: bool = Field(
        False,
        description="Also retry when the upstream dropped the connection after receiving the request "
        "(may run a non-idempotent call twice).",
    )
    shutdown_timeout: float = Field(30.0, ge=0, description="Seconds in-flight requests get to finish on SIGTERM.")

    def loggable(self) -> dict[str, object]:
        """The settings as a log line may show them: credentials inside URLs masked."""
        values = self.model_dump(mode="json")
        for name in ("upstream", "redis_url", "otel_endpoint"):
            if isinstance(values.get(name), str):
                values[name] = _mask_credentials(values[name])
        return values

    @model_validator(mode="after")
    def _metrics_apart(self) -> Settings:
        if self.metrics_port and self.metrics_port == self.port:
            raise ValueError("metrics_port must differ from port: metrics are never served on the API port")
        return self

    @field_validator("console_admin_key_sha256")
    @classmethod
    def _console_admin_digest(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if len(value) != 64 or any(c not in "0123456789abcdef" for c in value.lower()):
            raise ValueError("console_admin_key_sha256 must be 64 hex characters (sha256 of the key)")
        return value.lower()

    @field_validator("console_secret")
    @classmethod
    def _console_secret_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < 32:
            raise ValueError("console_secret must be at least 32 characters (e.g. `openssl rand -hex 32`)")
        return value

    @field_validator("upstream")
    @classmethod
    def _strip_trailing_slash(cls, value: str | None) -> str | None:
        return value.rstrip("/") if value else value


def _mask_credentials(url: str) -> str:
    """``redis://:secret@host:6379/0`` → ``redis://***@host:6379/0``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))
