"""The timeline's encoding, keys and listing summaries, shared by both stores."""

from __future__ import annotations

import pytest

from proxy.session.base import FIELDS, SessionState, TimelineEvent
from proxy.session.timeline import (
    client_name,
    decode_event,
    encode_event,
    index_key,
    listing,
    split_session_key,
    timeline_key,
)


def test_an_event_survives_its_encoding():
    event = TimelineEvent("step", 5, {"model": "m", "tokens_in": 3, "latency_ms": 1.5, "shadow": False, "x": None})

    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize(
    ("key", "parts"),
    [
        ("lw:{acme:s1}", ("acme", "s1")),
        ("lw:{default~abc:h-12:3}", ("default~abc", "h-12:3")),
        ("lw:{acme}:daily", None),
        ("lw:{acme:s1}:timeline", None),
        ("other", None),
    ],
)
def test_a_session_key_splits_into_namespace_and_id_and_no_other_key_does(key, parts):
    assert split_session_key(key) == parts


def test_the_timeline_shares_the_sessions_hash_tag_and_the_index_the_namespaces():
    assert timeline_key("lw:{acme:s1}") == "lw:{acme:s1}:timeline"
    assert index_key("acme") == "lw:{acme}:sessions"


def test_a_listing_is_the_last_seen_time_and_a_summary_without_empty_fields():
    state = SessionState({FIELDS.LAST_SEEN_MS: "2000", FIELDS.STEPS: "4", FIELDS.TERMINATION: "", "strike:x": "1"})

    assert listing(state, 60) == (2000, '{"steps":"4","expires_ms":62000}')


@pytest.mark.parametrize(
    ("agent", "name"),
    [
        ("codex_exec/0.46.0 (Debian 12; x86_64) xterm", "codex_exec"),
        ("claude-cli/2.0.1 (external, sdk-cli)", "claude-cli"),
        ("OpenAI/Python 1.99.0", "openai"),
        ("<script>/1", "script"),
        ("", "unknown"),
    ],
)
def test_the_client_is_the_first_product_of_its_user_agent(agent, name):
    assert client_name([("User-Agent", agent)]) == name


def test_a_request_without_a_user_agent_comes_from_an_unknown_client():
    assert client_name([("accept", "*/*")]) == "unknown"
