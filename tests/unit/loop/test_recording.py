"""The recorder: opt-in, bounded, never in the way of a reply."""

from __future__ import annotations

import asyncio
import json

import msgspec

from proxy.exchange import Reply, ToolCall, Usage
from proxy.guards.base import GuardContext
from proxy.loop.recording import Recorder, Step, redacted, step_record
from proxy.policy.models import Policy, RecordingSettings
from proxy.request import AgentRequest, RequestNotes
from proxy.session.base import SessionState
from proxy.session.identity import identify
from proxy.verdict import Finalize, Nudge, verdict_name
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.chat.parse import parse_conversation

PAYLOAD = {"model": "m", "messages": [{"role": "user", "content": "token sk-abcdefghijklmnop please"}]}
REPLY = Reply("ok", None, (ToolCall("c1", "search", '{"q": "x"}'),), "tool_calls", Usage(10, 5))


def chat_request(recording: RecordingSettings | None = None) -> AgentRequest:
    policy = Policy(recording=recording or RecordingSettings())
    conversation = parse_conversation(PAYLOAD)
    return AgentRequest(
        tenant="t",
        policy=policy,
        session=identify("t", conversation, "s1", None),
        payload=PAYLOAD,
        body=msgspec.json.encode(PAYLOAD),
        conversation=conversation,
        url="http://up/v1/chat/completions",
        headers=[("authorization", "Bearer sk-secret-key-123456")],
        stream=False,
        wire=CHAT_COMPLETIONS,
    )


def record_once(recorder: Recorder, request: AgentRequest, attempt: int = 1) -> None:
    context = GuardContext(request.policy, SessionState(), request.conversation)
    recorder.record(Step(request, context, attempt, REPLY, None, 0.01, RequestNotes(started=1.0)))


def test_verdict_names_follow_the_log_lines():
    nudge = Nudge("empty_nudge", "empty", ())

    assert [verdict_name(None), verdict_name(nudge), verdict_name(Finalize("loop", "looped"))] == [
        "pass",
        "empty_nudge",
        "finalize_loop",
    ]


def test_redacted_masks_keys_at_any_depth():
    assert redacted({"a": [{"b": "Bearer abcdefghijkl"}], "n": 3}) == {"a": [{"b": "Bearer [REDACTED]"}], "n": 3}


def test_a_record_holds_the_request_only_on_the_first_attempt():
    request = chat_request()
    context = GuardContext(request.policy, SessionState(), request.conversation)
    notes = RequestNotes(started=1.0)

    first = step_record(Step(request, context, 1, REPLY, None, 0.0, notes))
    second = step_record(Step(request, context, 2, REPLY, None, 0.0, notes))

    assert first["request"]["messages"][0]["content"] == "token [REDACTED] please"
    assert "request" not in second
    assert first["request_id"] == second["request_id"]
    assert "sk-secret-key" not in json.dumps(first)


async def test_a_policy_that_does_not_record_queues_nothing():
    recorder = Recorder()

    record_once(recorder, chat_request())

    assert (recorder.written, recorder.dropped) == (0, 0)
    await recorder.aclose()


async def test_records_are_appended_to_the_jsonl_file(tmp_path):
    path = tmp_path / "deep" / "steps.jsonl"
    recorder = Recorder()
    request = chat_request(RecordingSettings(enabled=True, jsonl_path=str(path)))

    record_once(recorder, request)
    record_once(recorder, request, attempt=2)
    await recorder.flush()

    assert [json.loads(line)["attempt"] for line in path.read_text().splitlines()] == [1, 2]
    await recorder.aclose()


async def test_a_full_queue_drops_records_instead_of_waiting(tmp_path):
    recorder = Recorder(queue_size=1)
    request = chat_request(RecordingSettings(enabled=True, jsonl_path=str(tmp_path / "s.jsonl")))

    for _ in range(3):
        record_once(recorder, request)  # the writer has not run yet: one fits, two are dropped

    assert recorder.dropped == 2
    await recorder.aclose()


async def test_an_unwritable_target_drops_the_batch_and_keeps_recording(tmp_path):
    recorder = Recorder()
    bad = chat_request(RecordingSettings(enabled=True, jsonl_path=str(tmp_path)))  # a directory
    good = chat_request(RecordingSettings(enabled=True, jsonl_path=str(tmp_path / "ok.jsonl")))

    record_once(recorder, bad)
    await recorder.flush()
    record_once(recorder, good)
    await recorder.flush()

    assert (recorder.dropped, recorder.written) == (1, 1)
    await recorder.aclose()


async def test_a_redis_stream_without_a_redis_url_is_dropped():
    recorder = Recorder(redis_url=None)

    record_once(recorder, chat_request(RecordingSettings(enabled=True, redis_stream="steps")))
    await asyncio.sleep(0)

    assert recorder.dropped == 1
    await recorder.aclose()


async def test_an_unreachable_redis_drops_the_batch_naming_where_it_is_never_its_password(log_records):
    recorder = Recorder(redis_url="redis://:hunter2-secret@127.0.0.1:1/0", timeout=0.2)

    record_once(recorder, chat_request(RecordingSettings(enabled=True, redis_stream="steps")))
    await recorder.flush()

    assert (recorder.dropped, recorder.written) == (1, 0)
    [why] = [r.fields["why"] for r in log_records if r.getMessage() == "recording_dropped"]
    assert why.startswith("writing the recording failed at Redis at 127.0.0.1:1/0: ConnectionError")
    assert "hunter2" not in why
    await recorder.aclose()
