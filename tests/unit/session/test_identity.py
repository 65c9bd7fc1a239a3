"""Session identity: derived from the opening, stable across turns, namespaced by tenant."""

from __future__ import annotations

import re

import pytest

from proxy.exchange import ToolCall
from proxy.session import identity
from proxy.session.identity import identify, named_run, turn_digest
from proxy.wire.chat.parse import parse_conversation

SYSTEM = {"role": "system", "content": "You are a travel agent."}
USER = {"role": "user", "content": "Book me a flight to Paris."}
ASSISTANT_CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "search", "arguments": '{"to":"PAR"}'}}],
}
TOOL = {"role": "tool", "tool_call_id": "call_1", "content": "3 flights"}


def conv(*messages):
    return parse_conversation({"messages": list(messages)})


def test_opening_only_request_derives_a_fresh_session():
    ref = identify("acme", conv(SYSTEM, USER), None, None)

    assert ref.derived
    assert ref.fresh
    assert ref.id.startswith("d-")


def test_later_turns_of_a_run_keep_its_id_and_are_not_fresh():
    second = identify("acme", conv(SYSTEM, USER, ASSISTANT_CALL, TOOL), None, None)
    answer = {"role": "assistant", "content": "3 flights found."}
    later = identify("acme", conv(SYSTEM, USER, ASSISTANT_CALL, TOOL, answer, USER), None, None)

    assert later.id == second.id
    assert not later.fresh


def test_a_run_is_named_by_its_first_reply_apart_from_the_opening():
    opening = identify("acme", conv(SYSTEM, USER), None, None)
    run = identify("acme", conv(SYSTEM, USER, ASSISTANT_CALL, TOOL), None, None)

    assert run.id != opening.id
    assert named_run(opening, turn_digest(None, [ToolCall("call_1", "search", "{}")])).key == run.key


def test_a_client_that_sends_the_first_reply_back_as_text_stays_in_the_run_it_named():
    """smolagents sends the calls the proxy delivered back as ``Calling tools:`` text, and the
    results as ``Observation:`` user turns: its next request continues the same run."""
    opening = identify("acme", conv(SYSTEM, USER), None, None)
    delivered = named_run(opening, turn_digest(None, [ToolCall("call_1", "search", '{"to":"PAR"}')]))
    flattened = {
        "role": "assistant",
        "content": "Calling tools:\n[{'id': 'call_1', 'type': 'function', 'function': {'name': 'search', "
        "'arguments': {'to': 'PAR'}}}]",
    }
    observation = {"role": "user", "content": "Observation:\n3 flights"}

    assert identify("acme", conv(SYSTEM, USER, flattened, observation), None, None).key == delivered.key


def test_the_run_an_opening_names_keeps_its_tenant_and_sub_agent():
    opening = identify("acme", conv(SYSTEM, USER), None, "helper")

    run = named_run(opening, turn_digest("Hello.", ()))

    assert run.id.endswith("@helper")
    assert run.sub_agent
    assert run.key == f"lw:{{acme:{run.id}}}"


def test_two_runs_of_one_task_with_different_first_calls_get_different_ids():
    other_call = {**ASSISTANT_CALL, "tool_calls": [{**ASSISTANT_CALL["tool_calls"][0], "id": "call_9"}]}
    other_tool = {**TOOL, "tool_call_id": "call_9"}

    one = identify("acme", conv(SYSTEM, USER, ASSISTANT_CALL, TOOL), None, None)
    two = identify("acme", conv(SYSTEM, USER, other_call, other_tool), None, None)

    assert one.id != two.id


def test_a_reply_is_known_by_its_call_ids_whatever_text_the_client_keeps_beside_them():
    calls = [ToolCall("call_1", "search", '{"to":"PAR"}')]

    assert turn_digest("Let me search.", calls) == turn_digest(None, [ToolCall("call_1", "search", '{"to": "PAR"}')])
    assert turn_digest("Paris  is\nlovely", ()) == turn_digest("Paris is lovely ", ())


def test_reserialized_assistant_turns_and_inserted_messages_do_not_move_the_id():
    compact = {
        **ASSISTANT_CALL,
        "tool_calls": [
            {**ASSISTANT_CALL["tool_calls"][0], "function": {"name": "search", "arguments": '{"to": "PAR"}'}}
        ],
    }
    inserted = {"role": "user", "content": "Also a hotel."}

    one = identify("acme", conv(SYSTEM, USER, ASSISTANT_CALL, TOOL), None, None)
    two = identify("acme", conv(SYSTEM, USER, inserted, compact, TOOL), None, None)

    assert one.id == two.id


def test_whitespace_and_content_parts_canonicalize_to_the_same_id():
    parts = {"role": "user", "content": [{"type": "text", "text": "Book me a flight   to Paris. "}]}

    assert identify("a", conv(SYSTEM, USER), None, None).id == identify("a", conv(SYSTEM, parts), None, None).id


def test_a_derived_id_is_the_one_earlier_releases_derived_for_the_same_run():
    # Pinned before whitespace was collapsed by str.split (it was the regex \s+): a rolling upgrade over Redis
    # state must find the runs the previous release stored.
    system = {"role": "system", "content": " You are\u00a0a travel\tagent.\n\n\u2003Be brief. "}
    user = {"role": "user", "content": "Book me a flight\r\nto Paris.\x1c"}

    assert identify("acme", conv(system, user, ASSISTANT_CALL), None, None).id == "d-cbf391c460f2f28bc28b8d4b92bc2d03"


def test_an_opening_is_remembered_per_tenant_and_identified_the_same_from_memory():
    opening = conv({"role": "system", "content": "A tenant's own instructions. " * 400}, USER, ASSISTANT_CALL)
    first = identify("tenant-a", opening, None, None)

    assert identify("tenant-a", opening, None, None).id == first.id
    assert ("tenant-a", opening.first_text("system"), USER["content"]) in identity._OPENINGS._entries
    assert ("tenant-b", opening.first_text("system"), USER["content"]) not in identity._OPENINGS._entries
    assert identify("tenant-b", opening, None, None).opening == first.opening


def test_an_opening_larger_than_the_memory_is_identified_without_being_kept():
    huge = conv({"role": "system", "content": "x " * 5_000_000}, USER)

    assert identify("a", huge, None, None).opening == identify("a", huge, None, None).opening
    assert identity._OPENINGS.weight <= identity._OPENINGS.max_weight
    assert not any(len(key[1]) > 9_000_000 for key in identity._OPENINGS._entries)


def test_different_openings_get_different_ids():
    other = {"role": "user", "content": "Book me a flight to Rome."}

    assert identify("a", conv(SYSTEM, USER), None, None).id != identify("a", conv(SYSTEM, other), None, None).id


def test_developer_role_counts_as_system():
    developer = {"role": "developer", "content": "You are a travel agent."}

    assert identify("a", conv(SYSTEM, USER), None, None).id == identify("a", conv(developer, USER), None, None).id


def test_header_session_wins_and_is_never_fresh():
    ref = identify("acme", conv(SYSTEM, USER), "run-42", None)

    assert (ref.id, ref.derived, ref.fresh) == ("run-42", False, False)


def test_agent_id_separates_sub_agents():
    parent = identify("acme", conv(SYSTEM, USER), "run-42", None)
    child = identify("acme", conv(SYSTEM, USER), "run-42", "researcher")

    assert child.id == "run-42@researcher"
    assert child.key != parent.key


def test_same_session_id_in_two_tenants_is_two_keys():
    assert identify("acme", conv(USER), "s1", None).key != identify("other", conv(USER), "s1", None).key


def test_keys_carry_a_cluster_hash_tag():
    assert identify("acme", conv(USER), "s1", None).key == "lw:{acme:s1}"


def test_unsafe_header_ids_are_hashed():
    ref = identify("acme", conv(USER), "evil}:{other:s1", None)

    assert ref.id.startswith("h-")
    assert ref.key.count("{") == 1
    assert ref.key.count("}") == 1


@pytest.mark.parametrize(
    "sent",
    ["séance", "会话", "a\nb", "a\r\nX-Injected: 1", "\x00\x01", "tab\there", "x" * 500, "a}{b", "\udcff"],
)
def test_any_sent_id_becomes_a_stable_id_that_fits_in_a_header(sent):
    first = identify("acme", conv(USER), sent, sent)
    again = identify("acme", conv(USER), sent, sent)

    assert re.fullmatch(r"[A-Za-z0-9._:@-]{1,300}", first.id)
    assert again == first
    assert first.key.startswith("lw:{acme:")


def test_a_session_id_the_client_format_carries_is_used_when_no_header_is_sent():
    ref = identify("acme", conv(SYSTEM, USER), None, None, "user_abc_session_1")

    assert (ref.id, ref.derived, ref.fresh) == ("user_abc_session_1", False, False)


def test_the_session_header_wins_over_the_client_format_session_id():
    ref = identify("acme", conv(SYSTEM, USER), "run-42", None, "user_abc_session_1")

    assert ref.id == "run-42"


@pytest.mark.parametrize(
    ("messages", "session_header", "named"),
    [
        ((SYSTEM, USER), None, False),  # the opening alone: its reply will name the run
        ((SYSTEM, USER, ASSISTANT_CALL, TOOL), None, True),
        ((SYSTEM, USER), "explicit", True),
    ],
    ids=["opening-only", "later-turn", "x-session-id"],
)
def test_only_a_derived_runs_first_request_goes_unnamed_until_its_reply_names_it(messages, session_header, named):
    ref = identify("acme", conv(*messages), session_header, None)

    assert ref.named is named
    if not named:
        assert named_run(ref, turn_digest("3 flights.", [])).named
