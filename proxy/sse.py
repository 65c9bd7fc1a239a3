"""Server-sent events, incrementally: bytes in as the network splits them, whole events out.

Follows the WHATWG parsing rules that matter for model APIs: lines end in CR, LF or CRLF
(a CR at the end of a read waits for the next byte), a leading byte-order mark is dropped,
comment lines (``:``) are skipped, ``data`` lines of one event are joined with LF, and an
event without data is not an event. Relays re-frame each event as one ``data:`` line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SSEEvent", "SSEParser", "comment", "frame"]

_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True)
class SSEEvent:
    data: bytes
    name: bytes = b""
    """The ``event:`` field (empty for the default ``message``)."""


class SSEParser:
    """Feed it what the network delivers; it returns the events completed so far."""

    __slots__ = ("_buffer", "_data", "_name", "_scan", "_started")

    def __init__(self) -> None:
        self._buffer = b""
        self._scan = 0
        """Offset in ``_buffer`` of the first line not yet read (the event began at 0)."""
        self._data: list[bytes] = []
        self._name = b""
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._buffer + chunk if self._buffer else chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._buffer = buffer
                return []
            self._started = True
            if buffer.startswith(_BOM):
                buffer = buffer[len(_BOM) :]
        events: list[SSEEvent] = []
        start, position = 0, self._scan
        while (match := _LINE_END.search(buffer, position)) is not None:
            if match.group() == b"\r" and match.end() == len(buffer):
                break  # a CR at the end of a read: the LF of a CRLF may still come
            line = buffer[position : match.start()]
            position = match.end()
            if not line:
                if self._data:
                    events.append(SSEEvent(b"\n".join(self._data), self._name))
                self._data, self._name = [], b""
                start = position
            elif line[0] != 0x3A:  # ":" starts a comment
                self._field(line)
        self._buffer = buffer[start:]
        self._scan = position - start
        return events

    def close(self) -> list[SSEEvent]:
        """The stream ended: settle a CR left waiting at the end of the last read."""
        return self.feed(b"\n") if self._buffer.endswith(b"\r") else []

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event are waiting (a stream that ends here was cut)."""
        return bool(self._buffer.strip())

    def _field(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._name = value


def frame(data: bytes) -> bytes:
    """One event carrying ``data`` (a line break in it continues on another ``data:`` line)."""
    if b"\n" in data:
        data = data.replace(b"\n", b"\ndata: ")
    return b"data: " + data + b"\n\n"


def comment(text: bytes) -> bytes:
    """A comment line: ignored by every SSE parser, keeps idle connections open."""
    return b": " + text + b"\n\n"
