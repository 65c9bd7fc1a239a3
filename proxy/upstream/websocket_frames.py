"""The bytes of a client WebSocket (RFC 6455) that need no connection: a client's frames
(masked), and the check of the upstream's answer to the upgrade.

Masking and the accept key are the websockets library's (the server's own library): its C loop
masks a 30 KB request about 80 times faster than its pure-Python fallback.
"""

from __future__ import annotations

import os
import struct

from websockets.utils import accept_key as _accept_key

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a build of the library without its C extension
    from websockets.utils import apply_mask

__all__ = ["CLOSE_CODES", "HandshakeRefused", "accept_key", "check_answer", "client_frame", "mask"]

_MEDIUM = struct.Struct("!BBH").pack
_LONG = struct.Struct("!BBQ").pack
CLOSE_CODES = frozenset({1000, 1001, 1002, 1003, 1006, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014})
"""Close codes below 3000 a peer may send (aiohttp's list, kept: any other is a protocol error)."""


class HandshakeRefused(Exception):
    """The upstream did not accept the upgrade: ``status`` is its answer (None: no valid answer)."""

    def __init__(self, status: int | None, reason: str) -> None:
        super().__init__(reason)
        self.status = status


def mask(payload: bytes, key: bytes) -> bytes:
    """``payload`` XOR the repeated 4-byte ``key`` (RFC 6455, 5.3); masking twice unmasks."""
    return apply_mask(payload, key)


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One unfragmented frame as a client must send it: masked, with a fresh random key."""
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 65536:
        head = _MEDIUM(0x80 | opcode, 0xFE, size)
    else:
        head = _LONG(0x80 | opcode, 0xFF, size)
    key = os.urandom(4)  # RFC 6455, 5.3: from a strong source of entropy
    return head + key + mask(payload, key)


def accept_key(key: bytes) -> bytes:
    """The ``Sec-WebSocket-Accept`` that proves a server read the handshake's ``key``."""
    return _accept_key(key.decode("ascii")).encode("ascii")


def check_answer(head: bytes, key: bytes) -> None:
    """The upstream's answer (its head, without the blank line) to a handshake sent with
    ``key``: nothing when it accepts, else :class:`HandshakeRefused` with its status."""
    lines = head.split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1.") or not status_line[1].isdigit():
        raise HandshakeRefused(None, "the upstream's answer to the upgrade is not HTTP")
    status = int(status_line[1])
    if status != 101:
        raise HandshakeRefused(status, f"the upstream answered the upgrade {status}")
    fields: dict[bytes, bytes] = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip()
    upgrade = fields.get(b"upgrade", b"").lower()
    connection = {token.strip() for token in fields.get(b"connection", b"").lower().split(b",")}
    if (
        upgrade != b"websocket"
        or b"upgrade" not in connection
        or fields.get(b"sec-websocket-accept") != accept_key(key)
    ):
        raise HandshakeRefused(status, "the upstream's 101 is not a valid WebSocket handshake")
