"""A client's WebSocket frames and the check of the upstream's answer to the upgrade, read
against the websockets library's own parser and RFC 6455's example."""

from __future__ import annotations

import pytest
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader
from websockets.utils import apply_mask as pure_python_mask

from proxy.upstream.websocket_frames import HandshakeRefused, accept_key, check_answer, client_frame, mask

ACCEPT = b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def parsed(data: bytes) -> Frame:
    """``data`` as the websockets library parses a frame a server receives (masked)."""
    reader = StreamReader()
    reader.feed_data(data)
    parser = Frame.parse(reader.read_exact, mask=True)
    try:
        next(parser)
    except StopIteration as done:
        return done.value
    raise AssertionError("an incomplete frame")


@pytest.mark.parametrize("size", [0, 1, 125, 126, 65535, 65536])
def test_a_client_frame_is_masked_and_reads_back_as_its_payload(size):
    payload = bytes(range(256)) * (size // 256) + bytes(range(size % 256))

    frame = parsed(client_frame(1, payload))

    assert (frame.opcode, frame.fin, bytes(frame.data)) == (Opcode.TEXT, True, payload)


def test_two_frames_of_one_payload_have_their_own_keys():
    assert client_frame(1, b"same" * 8) != client_frame(1, b"same" * 8)


def test_masking_twice_gives_the_payload_back():
    assert mask(mask(b"hello, world", b"abcd"), b"abcd") == b"hello, world"
    assert mask(b"", b"abcd") == b""


@pytest.mark.parametrize("size", [0, 1, 3, 4, 5, 125, 65_539])
def test_the_masks_c_loop_and_its_fallback_agree(size):
    payload = bytes(range(256)) * (size // 256 + 1)

    assert mask(payload[:size], b"\x01\x80\xfe\x7f") == pure_python_mask(payload[:size], b"\x01\x80\xfe\x7f")


def test_the_accept_key_is_the_rfcs():
    assert accept_key(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_a_101_with_the_right_accept_opens_the_socket_whatever_the_header_case():
    head = b"HTTP/1.1 101 Switching Protocols\r\nUPGRADE: WebSocket\r\nConnection: keep-alive, Upgrade\r\n"
    check_answer(head + b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=", b"dGhlIHNhbXBsZSBub25jZQ==")


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0", 426),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade", 101),
        (b"HTTP/1.1 101 OK\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n" + ACCEPT, 101),
        (b"HTTP/1.1 101 OK\r\nUpgrade: websocket\r\n" + ACCEPT, 101),
        (b"garbage", None),
        (b"HTTP/1.1 abc", None),
    ],
    ids=["refused", "no-accept", "other-upgrade", "no-connection", "not-http", "no-status"],
)
def test_any_other_answer_refuses_the_handshake_with_its_status(head, status):
    with pytest.raises(HandshakeRefused) as refused:
        check_answer(head, b"dGhlIHNhbXBsZSBub25jZQ==")

    assert refused.value.status == status
