"""The registry of wire formats: which format a pass-through call speaks."""

from __future__ import annotations

from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.messages.format import MESSAGES
from proxy.wire.registry import passthrough_format


def test_pass_through_calls_of_messages_clients_are_told_apart():
    def no_header(name: bytes) -> str | None:
        return None

    def anthropic_client(name: bytes) -> str | None:
        return "2023-06-01" if name == b"anthropic-version" else None

    assert passthrough_format("/v1/messages/count_tokens", no_header) is MESSAGES
    assert passthrough_format("/v1/models", anthropic_client) is MESSAGES
    assert passthrough_format("/v1/models", no_header) is None
    assert passthrough_format("/v1/chat/completions/abc", no_header) is CHAT_COMPLETIONS
