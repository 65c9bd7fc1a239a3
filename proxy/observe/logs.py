"""Structured logging: one JSON object per line, fields passed as ``extra={"fields": {...}}``.

Callers pass only what is safe to log (names, counts, digests, statuses); message
contents and keys never go in. Third-party loggers that would log every upstream call or
URL (httpx, aiohttp, litestar) are turned down so they cannot leak what we keep out.
"""

from __future__ import annotations

import logging
import re
import sys
import time
from collections.abc import Mapping
from typing import Any

import msgspec

__all__ = ["JsonFormatter", "configure_logging", "log_event", "logger", "redact"]

_SECRETS = re.compile(
    r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}|\b(sk|lw|rk|pk)-[A-Za-z0-9_-]{8,}|"
    r"(api[_-]?key|authorization|x-loopwarden-key)([\"']?\s*[:=]\s*[\"']?)(?!bearer\b|basic\b)[^\s\"',]{6,}"
)


def redact(text: str) -> str:
    """Mask anything that looks like a key (bearer tokens, sk-/lw- keys, key=value pairs)."""

    def mask(match: re.Match[str]) -> str:
        if match.group(1):
            return match.group(1) + "[REDACTED]"
        if match.group(3):
            return match.group(3) + match.group(4) + "[REDACTED]"
        return "[REDACTED]"

    return _SECRETS.sub(mask, text)


logger = logging.getLogger("loopwarden")
_encode = msgspec.json.Encoder().encode
_HANDLER_NAME = "loopwarden-json"


class JsonFormatter(logging.Formatter):
    """Renders a record as one JSON line: time, level, event, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            payload.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            payload["error_type"] = record.exc_info[0].__name__
        return _encode(payload).decode()


def configure_logging(level: str) -> None:
    """Route the proxy's log to stderr as JSON and quiet libraries that log request lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    handler.set_name(_HANDLER_NAME)
    # Replace only our own handler, so calling this twice does not log twice.
    logger.handlers[:] = [h for h in logger.handlers if h.get_name() != _HANDLER_NAME] + [handler]
    logger.setLevel(level.upper())
    logger.propagate = False
    for noisy in ("httpx", "httpcore", "aiohttp", "litestar", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_event(event: str, fields: Mapping[str, object], level: int = logging.INFO, *, at: float | None = None) -> None:
    """Log one structured event if the level is on; cheap when it is not. ``at``: when it
    happened, for a line written later than that (epoch seconds; default now)."""
    if not logger.isEnabledFor(level):
        return
    if at is None:
        logger.log(level, event, extra={"fields": fields})
        return
    record = logger.makeRecord(logger.name, level, __file__, 0, event, (), None, extra={"fields": fields})
    record.created, record.msecs = at, (at % 1) * 1000
    logger.handle(record)
