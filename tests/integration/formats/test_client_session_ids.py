"""The ids a client already sends name its session, in every wire format: ``X-Session-Id`` (with
a sub-agent's ``X-Agent-Id``) everywhere, and each format's own (Codex's headers and
``client_metadata``, Claude Code's ``metadata.user_id``), the explicit header winning."""

from __future__ import annotations


def test_the_ids_a_client_already_sends_name_its_session(wire_format, proxy):
    named = [
        wire_format.ask(proxy, headers=headers, fields=fields).headers["x-loopwarden-session"]
        for headers, fields, _ in wire_format.client_ids
    ]

    assert named == [expected for _, _, expected in wire_format.client_ids]
