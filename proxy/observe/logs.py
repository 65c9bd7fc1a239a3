"""Structured logging: one JSON object per line, fields passed as ``extra={"fields": {...}}``.

Callers pass only what is safe to log (names, counts, digests, statuses); message
contents and keys never go in. Third-party loggers that would log every upstream call or
URL (httpx, aiohttp, litestar) are turned down so they cannot leak what we keep out.

At the default level every request logs a line or two, so a line must cost next to nothing
on the event loop: :func:`log_event` renders it straight to JSON when the proxy's own handler
is the only one listening (no ``LogRecord``, no caller lookup; anyone else attached, a test's
handler or an operator's, gets records as usual), and :class:`JsonLines` writes the lines
from a thread of its own, in batches, so a slow reader of stderr never stalls the loop.
"""

from __future__ import annotations

import logging
import queue
import re
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any, TextIO

import msgspec

__all__ = ["JsonFormatter", "JsonLines", "configure_logging", "log_event", "logger", "redact"]

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


_this_second: tuple[int, str] = (-1, "")
_MILLIS = tuple(f".{millis:03d}Z" for millis in range(1000))
"""The end of a ``ts``, by millisecond: looked up, not formatted, for every line."""


def _timestamp(created: float) -> str:
    """``created`` (epoch seconds) as the lines write it, UTC to the millisecond; the part up
    to the second is formatted once a second (one tuple, so any thread reads a matching pair)."""
    global _this_second
    second = int(created)
    cached = _this_second
    if cached[0] != second:
        cached = _this_second = (second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second)))
    return cached[1] + _MILLIS[int((created - second) * 1000)]


class JsonFormatter(logging.Formatter):
    """Renders a record as one JSON line: time, level, event, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": _timestamp(record.created),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if fields:
            payload.update(fields)
        if record.exc_info and record.exc_info[0] is not None:
            payload["error_type"] = record.exc_info[0].__name__
        return _encode(payload).decode()


_LEVELS = {level: logging.getLevelName(level).lower() for level in (10, 20, 30, 40, 50)}
_RESERVED = frozenset(("ts", "level", "event"))
"""The keys a line starts with; fields of these names take their place (the formatter's way)."""
_MAX_HEADS = 1_024


def _level_name(level: int) -> str:
    return _LEVELS.get(level) or logging.getLevelName(level).lower()


_BATCH_PAUSE = 0.005
"""After writing a batch, the writer lets lines gather this long (seconds) before the next."""
MAX_QUEUED_LINES = 65_536
"""Lines waiting for a stderr nobody reads (a full pipe) are dropped past this many, and counted
in a ``log_lines_dropped`` line once the writer gets through: memory stays bounded."""


class JsonLines(logging.Handler):
    """The proxy's handler: each record as one JSON line, written to ``stream`` by a thread of
    its own (see the module's docstring). Lines keep their order; :meth:`flush` (called at
    exit by :func:`logging.shutdown`) returns once every line taken is written."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.setFormatter(JsonFormatter())
        self.stream = stream
        self._lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._writing = threading.Lock()
        self._writer: threading.Thread | None = None
        self._closed = False
        self._heads: dict[tuple[int, str], str] = {}
        self.dropped = 0
        """Lines dropped since the last batch was written (see ``MAX_QUEUED_LINES``)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.put(self.format(record) + "\n")
        except Exception:
            self.handleError(record)

    def put(self, line: str) -> None:
        """Queue one rendered line (ending in a newline) for the writer (once closed: written at once)."""
        if self._writer is None:
            self._start()
            if self._closed:
                with self._writing:
                    self._drain([line])
                return
        if self._lines.qsize() >= MAX_QUEUED_LINES:
            self.dropped += 1
            return
        self._lines.put(line)

    def line(self, event: str, fields: Mapping[str, object], level: int, at: float | None = None) -> None:
        """What :meth:`emit` writes for ``log_event(event, fields, level)``, made without a record:
        the fields encoded alone and spliced after a head made once per level and event (no
        payload dict copied per line)."""
        ts = _timestamp(time.time() if at is None else at)
        head = self._heads.get((level, event))
        if head is None:
            head = self._head(level, event)
        if type(fields) is not dict or not _RESERVED.isdisjoint(fields):  # a field overrides the head's
            payload: dict[str, Any] = {"ts": ts, "level": _level_name(level), "event": event}
            payload.update(fields)
            self.put(_encode(payload).decode() + "\n")
            return
        body = _encode(fields).decode()
        self.put(f'{{"ts":"{ts}",{head},{body[1:]}\n' if len(body) > 2 else f'{{"ts":"{ts}",{head}}}\n')

    def _head(self, level: int, event: str) -> str:
        """``"level":…,"event":…`` as a line writes them (remembered for up to ``_MAX_HEADS`` pairs)."""
        head = f'"level":{_encode(_level_name(level)).decode()},"event":{_encode(event).decode()}'
        if len(self._heads) < _MAX_HEADS:
            self._heads[(level, event)] = head
        return head

    def _start(self) -> None:
        with self._writing:
            if self._writer is None and not self._closed:
                self._writer = threading.Thread(target=self._write_on, name="loopwarden-log", daemon=True)
                self._writer.start()

    def _write_on(self) -> None:
        while True:
            first = self._lines.get()
            with self._writing:
                stop = self._drain([] if first is None else [first]) or first is None
            if stop:
                return
            time.sleep(_BATCH_PAUSE)

    def _drain(self, lines: list[str]) -> bool:
        """Write ``lines`` and every line queued after them, at once; True when the writer was
        told to stop meanwhile. Called with ``_writing`` held."""
        stop = False
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                break
            if line is None:
                stop = True
            else:
                lines.append(line)
        if self.dropped:
            dropped, self.dropped = self.dropped, 0  # a put racing this reset is counted in the next batch or lost
            payload = {
                "ts": _timestamp(time.time()),
                "level": "warning",
                "event": "log_lines_dropped",
                "count": dropped,
            }
            lines.append(_encode(payload).decode() + "\n")
        if lines:
            try:
                self.stream.write("".join(lines))
                self.stream.flush()
            except (OSError, ValueError):  # stderr closed or gone: nothing to tell it
                pass
        return stop

    def flush(self) -> None:
        with self._writing:
            if self._drain([]):
                self._lines.put(None)  # the writer's stop, taken here: handed back to it

    def close(self) -> None:
        """Write what is queued and stop the writer."""
        with self._writing:
            self._closed = True
            writer, self._writer = self._writer, None
        if writer is not None:
            self._lines.put(None)
            writer.join(5)
        self.flush()
        super().close()


_sink: JsonLines | None = None


def configure_logging(level: str) -> None:
    """Route the proxy's log to stderr as JSON and quiet libraries that log request lines."""
    global _sink
    handler = JsonLines(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    # Replace only our own handler, so calling this twice does not log twice.
    for old in [h for h in logger.handlers if h.get_name() == _HANDLER_NAME]:
        logger.removeHandler(old)
        old.close()
    logger.addHandler(handler)
    _sink = handler
    logger.setLevel(level.upper())
    logger.propagate = False
    for noisy in ("httpx", "httpcore", "aiohttp", "litestar", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def log_event(event: str, fields: Mapping[str, object], level: int = logging.INFO, *, at: float | None = None) -> None:
    """Log one structured event if the level is on; cheap when it is not, and when only the
    proxy's own handler listens (the line is rendered at once, see the module's docstring).
    ``at``: when it happened, for a line written later than that (epoch seconds; default now)."""
    if not logger.isEnabledFor(level):
        return
    handlers, sink = logger.handlers, _sink
    alone = len(handlers) == 1 and handlers[0] is sink and not logger.filters
    if alone and sink is not None and level >= sink.level and not sink.filters:
        sink.line(event, fields, level, at)
        return
    if at is None:
        logger.log(level, event, extra={"fields": fields})
        return
    record = logger.makeRecord(logger.name, level, __file__, 0, event, (), None, extra={"fields": fields})
    record.created, record.msecs = at, (at % 1) * 1000
    logger.handle(record)
