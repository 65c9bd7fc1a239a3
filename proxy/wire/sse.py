"""Server-sent events, incrementally: bytes in as the network splits them, whole events out.

Follows the WHATWG parsing rules that matter for model APIs: lines end in CR, LF or CRLF
(a CR at the end of a read waits for the next byte), a leading byte-order mark is dropped,
comment lines (``:``) are skipped, ``data`` lines of one event are joined with LF, and an
event without data is not an event. Relays re-frame each event as one ``data:`` line, after
its ``event:`` name when it has one.
"""

from __future__ import annotations

import re
from itertools import chain, repeat
from operator import itemgetter
from typing import NamedTuple

__all__ = ["SSEEvent", "SSEParser", "comment", "frame"]

_BOM = b"\xef\xbb\xbf"
_event = tuple.__new__
"""An :class:`SSEEvent` made in C (its generated ``__new__`` is a Python call per event)."""
_NAMED_BLOCK = re.compile(rb"(?:(?<=\n\n)|^)event: ([^\n]*+)\ndata: ([^\n]*+)\n\n")
_DATA_BLOCK = re.compile(rb"(?:(?<=\n\n)|^)data: ([^\n]*+)\n\n")
"""A block starts where the read or the last block does, and its lines are taken whole, never
given back: no attempt starts inside a line or scans a line twice, so a read of one long line full
of ``event: `` costs its length, not its length squared."""
_swapped = itemgetter(1, 0)
"""(name, data) as found → (data, name) as an event holds them."""


class SSEEvent(NamedTuple):
    """One event (a tuple: built for every event of every stream)."""

    data: bytes
    name: bytes = b""
    """The ``event:`` field (empty for the default ``message``)."""


class SSEParser:
    """Feed it what the network delivers; it returns the events completed so far."""

    __slots__ = ("_data", "_name", "_partial", "_started")

    def __init__(self) -> None:
        self._partial = b""
        """The start of a line whose end has not arrived (a lone CR waits here too)."""
        self._data: list[bytes] = []
        self._name = b""
        self._started = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        buffer = self._partial + chunk if self._partial else chunk
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                self._partial = buffer
                return []
            self._started = True
            if buffer.startswith(_BOM):
                buffer = buffer[len(_BOM) :]
        events: list[SSEEvent] = []
        if b"\r" in buffer:
            # A CR at the very end may be the first half of a CRLF: it waits for the next read.
            held = b"\r" if buffer.endswith(b"\r") else b""
            body = buffer[:-1] if held else buffer
            lines = body.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
            lines[-1] += held
        else:
            if not self._data and not self._name and (end := buffer.rfind(b"\n\n")) >= 0:
                tiled = _tiled(buffer, end + 2)
                if tiled is None:
                    self._whole(buffer[:end].split(b"\n\n"), events)
                else:
                    events = tiled
                buffer = buffer[end + 2 :]
            lines = buffer.split(b"\n")
        self._partial = lines.pop()
        self._lines(lines, events)
        return events

    def _whole(self, blocks: list[bytes], events: list[SSEEvent]) -> None:
        """Whole events, read at an event's start: one ``data:`` line, after one ``event:``
        line or none (every event of the model APIs), taken as a block; any other by its lines."""
        for block in blocks:
            if block[:6] == b"data: ":
                if block.find(b"\n") < 0:
                    events.append(_event(SSEEvent, (block[6:], b"")))
                    continue
            elif block[:7] == b"event: ":
                at = block.find(b"\n")
                if block[at : at + 7] == b"\ndata: " and block.find(b"\n", at + 1) < 0:
                    events.append(_event(SSEEvent, (block[at + 7 :], block[7:at])))
                    continue
            self._lines([*block.split(b"\n"), b""], events)

    def _lines(self, lines: list[bytes], events: list[SSEEvent]) -> None:
        data = self._data
        for line in lines:
            if not line:
                if data:
                    events.append(_event(SSEEvent, (data[0] if len(data) == 1 else b"\n".join(data), self._name)))
                    data = self._data = []
                self._name = b""
            elif line[:5] == b"data:":
                data.append(line[6:] if len(line) > 5 and line[5] == 0x20 else line[5:])
            elif line[:6] == b"event:":  # every event of Responses' and Messages' streams has one
                self._name = line[7:] if len(line) > 6 and line[6] == 0x20 else line[6:]
            elif line[0] != 0x3A:  # ":" starts a comment
                self._field(line)

    def close(self) -> list[SSEEvent]:
        """The stream ended: settle a CR left waiting at the end of the last read."""
        return self.feed(b"\n") if self._partial.endswith(b"\r") else []

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event are waiting (a stream that ends here was cut)."""
        return bool(self._data) or bool(self._partial.strip())

    def _field(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self._data.append(value)
        elif name == b"event":
            self._name = value


def _tiled(buffer: bytes, end: int) -> list[SSEEvent] | None:
    """The events of ``buffer[:end]`` when it is nothing but blocks of one of the two forms
    every model API sends (``event: NAME`` then ``data: DATA``, or ``data: DATA`` alone), found
    in one pass in C; None for anything else (comments, fields split over lines, mixed forms),
    which is read block by block. The blocks found tile the whole span exactly when their
    lengths add up to it (matches never overlap), so nothing between them is skipped unread."""
    if buffer.startswith(b"event: "):
        named = _NAMED_BLOCK.findall(buffer, 0, end)
        if sum(map(len, chain.from_iterable(named))) + 16 * len(named) != end:
            return None
        return list(map(_event, repeat(SSEEvent), map(_swapped, named)))
    datas = _DATA_BLOCK.findall(buffer, 0, end)
    if sum(map(len, datas)) + 8 * len(datas) != end:
        return None
    return list(map(_event, repeat(SSEEvent), zip(datas, repeat(b""))))


def frame(data: bytes, name: bytes = b"") -> bytes:
    """One event carrying ``data`` (a line break in it continues on another ``data:`` line),
    named ``name`` when given (Messages' and Responses' clients dispatch on the name)."""
    if data.find(b"\n") >= 0:  # find, not ``in``: half the work per event (no buffer export)
        data = data.replace(b"\n", b"\ndata: ")
    if name:
        return b"event: %b\ndata: %b\n\n" % (name, data)  # one new bytes, not four
    return b"data: %b\n\n" % data


def comment(text: bytes) -> bytes:
    """A comment line: ignored by every SSE parser, keeps idle connections open."""
    return b": " + text + b"\n\n"
