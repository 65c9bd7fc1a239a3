"""SSE plumbing for relayed streams: see the usage chunk go by, and hide it when asked.

To meter streamed tokens the proxy asks the upstream for usage (``stream_options.
include_usage``); a client that did not ask must not receive the extra chunk, since some
stream parsers choke on a chunk with no choices. Events are passed on as soon as they are
complete (a partial event waits for its end, which is at most one network read away).
"""

from __future__ import annotations

import msgspec

from proxy.exchange import Usage
from proxy.wire.chat_completions import parse_usage

__all__ = ["UsageTap"]

_SEPARATORS = (b"\r\n\r\n", b"\n\n", b"\r\r")


def _split_event(data: bytes) -> int:
    """Index just past the first complete event in ``data``, or -1."""
    ends = [(index + len(sep)) for sep in _SEPARATORS if (index := data.find(sep)) >= 0]
    return min(ends) if ends else -1


class UsageTap:
    """Feed it the upstream's bytes; it returns what the client should get and keeps the usage."""

    def __init__(self, *, strip_usage: bool) -> None:
        self.usage: Usage | None = None
        self._strip = strip_usage
        self._pending = b""

    def feed(self, chunk: bytes) -> bytes:
        data = self._pending + chunk if self._pending else chunk
        out: list[bytes] = []
        while (end := _split_event(data)) >= 0:
            out.append(self._filter(data[:end]))
            data = data[end:]
        self._pending = data
        return b"".join(out)

    def flush(self) -> bytes:
        """Whatever is left at the end of the stream (an unterminated last event)."""
        rest, self._pending = self._pending, b""
        return self._filter(rest) if rest else b""

    def _filter(self, event: bytes) -> bytes:
        if b'"usage"' not in event:
            return event
        for line in event.splitlines():
            if not line.startswith(b"data:"):
                continue
            try:
                payload = msgspec.json.decode(line[5:].strip())
            except (msgspec.DecodeError, RecursionError):
                return event
            if isinstance(payload, dict) and isinstance(payload.get("usage"), dict):
                self.usage = parse_usage(payload["usage"])
                if self._strip and not payload.get("choices"):
                    return b""
        return event
