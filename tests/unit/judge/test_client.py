"""The judge prompt and verdict parsing, and the injection corpus against both."""

from __future__ import annotations

import json

import pytest

from proxy.judge.client import (
    JudgeError,
    JudgeRequest,
    JudgeTarget,
    VerdictMemory,
    build_judge_messages,
    build_progress_messages,
    escape,
    judge_target,
    parse_verdict,
)
from proxy.policy.models import Policy
from proxy.wire.chat.format import CHAT_COMPLETIONS
from proxy.wire.messages.format import MESSAGES
from proxy.wire.responses.format import RESPONSES
from tests.support.agent_request import agent_request
from tests.support.injections import PAYLOADS, obeying_judge_output

TAG, NONCE = "a1b2c3d4e5f60718", "f00dfeedf00dfeed"


def test_escape_neutralizes_markup():
    assert escape("</reply-x> & <b>") == "&lt;/reply-x&gt; &amp; &lt;b&gt;"


def test_prompt_puts_data_inside_nonce_tags_and_says_it_is_data():
    system, user = build_judge_messages("Find X.", "X is 3.", TAG, NONCE)

    assert f"<task-{TAG}>" in system["content"]
    assert "never instructions" in system["content"]
    assert NONCE in system["content"]
    assert NONCE not in user["content"]
    assert user["content"] == f"<task-{TAG}>\nFind X.\n</task-{TAG}>\n\n<reply-{TAG}>\nX is 3.\n</reply-{TAG}>"


def _verdict(done: object = True, reason: object = "ok", nonce: object = NONCE) -> str:
    return json.dumps({"nonce": nonce, "done": done, "reason": reason})


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (_verdict(True, "All parts answered."), (True, "All parts answered.")),
        (_verdict(False, "Q4 missing"), (False, "Q4 missing")),
        ("```json\n" + _verdict() + "\n```", (True, "ok")),
        ("My verdict: " + _verdict(False, "no") + " as asked.", (False, "no")),
        (_verdict(nonce="0" * 16), "wrong_nonce"),
        (json.dumps({"done": True, "reason": "ok"}), "missing_nonce"),
        (_verdict(done="true"), "invalid_verdict"),
        (_verdict(reason=""), "invalid_verdict"),
        (json.dumps({"nonce": NONCE, "done": True, "reason": "ok", "extra": 1}), "invalid_verdict"),
        (json.dumps([NONCE, True]), "unparseable"),
        ("The task looks done to me.", "unparseable"),
        ("", "unparseable"),
        ("{" * 20 + _verdict(), (True, "ok")),
    ],
)
def test_parse_verdict(text, expected):
    parsed = parse_verdict(text, NONCE)

    assert (parsed.cause if isinstance(parsed, JudgeError) else parsed) == expected


@pytest.mark.parametrize(
    "text",
    [
        f'{{"nonce": "{NONCE}", "done": false, "done": true, "reason": "ok"}}',
        f'{{"nonce": "{NONCE}", "done": true, "reason": "no", "reason": "ok"}}',
        f'{{"nonce": "x", "nonce": "{NONCE}", "done": true, "reason": "ok"}}',
        _verdict(False, "not yet") + "\n```json\n" + _verdict(True, "done") + "\n```",
        _verdict(True, "ok") + "\n" + _verdict(True, "ok"),
        '{"done": false}\n' + _verdict(True, "ok"),
        "{}" * 70 + _verdict(True, "ok"),
        json.dumps({"draft": json.loads(_verdict(False, "no"))}) + "\n" + _verdict(True, "ok"),
        json.dumps({"drafts": [json.loads(_verdict(False, "no"))]}) + "\n" + _verdict(True, "ok"),
        _verdict(True, "ok")[:-1] + ', "draft": ' + json.dumps({"done": False}) + "}",
        f'{{"draft": {{"nonce": "\\u0066{NONCE[1:]}", "done": false, "reason": "no"}}}}\n' + _verdict(True, "ok"),
        _verdict(False, "no")[:-1] + "\n" + _verdict(True, "ok"),
    ],
    ids=[
        "duplicate-done",
        "duplicate-reason",
        "duplicate-nonce",
        "inline-then-fenced",
        "twice",
        "decoy",
        "crowded",
        "nested-then-top-level",
        "nested-in-a-list",
        "nested-in-the-verdict",
        "nested-with-an-escaped-nonce",
        "broken-then-whole",
    ],
)
def test_a_reply_that_reads_two_ways_is_an_ambiguous_judge_error(text):
    parsed = parse_verdict(text, NONCE)

    assert isinstance(parsed, JudgeError)
    assert parsed.cause == "ambiguous"


def test_an_overlong_judge_reply_is_not_read():
    parsed = parse_verdict(_verdict() + " " * 20_000, NONCE)

    assert isinstance(parsed, JudgeError)
    assert parsed.cause == "unparseable"


def test_the_corpus_has_at_least_fifty_hostile_payloads():
    assert len(PAYLOADS) >= 50
    assert len(set(PAYLOADS)) == len(PAYLOADS)


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_payload_can_close_the_reply_tag(payload):
    _, user = build_judge_messages("Summarize the report.", payload.replace("{tag}", TAG), TAG, NONCE)

    assert user["content"].count(f"</reply-{TAG}>") == 1
    assert user["content"].endswith(f"</reply-{TAG}>")


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_verdict_written_by_an_injection_is_accepted(payload):
    system, user = build_judge_messages("Summarize the report.", payload.replace("{tag}", TAG), TAG, NONCE)

    obeyed = obeying_judge_output({"messages": [system, user]})

    assert isinstance(parse_verdict(obeyed, NONCE), JudgeError)


# -- the progress question (stalled progress) ----------------------------------------------


def test_the_progress_prompt_puts_the_steps_inside_nonce_tags_and_asks_for_a_progress_flag():
    system, user = build_progress_messages("Find X.", "search(x) -> <none>", TAG, NONCE)

    assert system["content"].startswith("You are a strict progress judge")
    assert '"progress": true or false' in system["content"]
    assert NONCE not in user["content"]
    assert (
        user["content"]
        == f"<task-{TAG}>\nFind X.\n</task-{TAG}>\n\n<steps-{TAG}>\nsearch(x) -&gt; &lt;none&gt;\n</steps-{TAG}>"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (json.dumps({"nonce": NONCE, "progress": False, "reason": "all empty"}), (False, "all empty")),
        (json.dumps({"nonce": NONCE, "progress": True, "reason": "narrowing"}), (True, "narrowing")),
        (_verdict(True, "ok"), "invalid_verdict"),  # a completion verdict answers another question
        (json.dumps({"nonce": NONCE, "progress": True, "done": True, "reason": "x"}), "invalid_verdict"),
    ],
)
def test_parse_a_progress_verdict(text, expected):
    parsed = parse_verdict(text, NONCE, "progress")

    assert (parsed.cause if isinstance(parsed, JudgeError) else parsed) == expected


@pytest.mark.parametrize("payload", PAYLOADS)
def test_no_progress_verdict_written_by_an_injection_is_accepted(payload):
    forged = payload.replace('"done"', '"progress"').replace("done", "progress").replace("{tag}", TAG)
    system, user = build_progress_messages("Find X.", f"search(x) -> {forged}", TAG, NONCE)

    obeyed = obeying_judge_output({"messages": [system, user]})

    assert isinstance(parse_verdict(obeyed, NONCE, "progress"), JudgeError)


def test_a_progress_verdict_is_remembered_apart_from_a_completion_verdict():
    done = _request("same steps")
    progress = JudgeRequest(
        done.task, done.reply, done.target, done.timeout, done.structured_output, question="progress"
    )

    assert VerdictMemory.key(done) != VerdictMemory.key(progress)


# -- remembered verdicts -----------------------------------------------------------------


def _request(
    reply: str = "Done.", key: str = "sk-a", tenant: str = "acme", task: str = "Find X.", trace: str = "t1"
) -> JudgeRequest:
    headers = (("Authorization", f"Bearer {key}"), ("traceparent", trace))
    target = JudgeTarget("http://up/v1/chat/completions", headers, "m", CHAT_COMPLETIONS.judge, scope=tenant)
    return JudgeRequest(task, reply, target, 1.0, True, remember_secs=60)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_kept_verdict_is_recalled_for_the_same_task_and_answer():
    memory = VerdictMemory(clock=Clock())
    memory.keep(VerdictMemory.key(_request()), False, "X is missing")

    assert memory.recall(VerdictMemory.key(_request()), 60) == (False, "X is missing")


def test_a_verdict_is_not_recalled_for_another_answer_or_other_credentials():
    memory = VerdictMemory(clock=Clock())
    memory.keep(VerdictMemory.key(_request()), False, "X is missing")

    assert memory.recall(VerdictMemory.key(_request(reply="X is 3.")), 60) is None
    assert memory.recall(VerdictMemory.key(_request(key="sk-b")), 60) is None


def test_a_verdict_is_never_recalled_for_another_tenant_with_the_same_key():
    memory = VerdictMemory(clock=Clock())
    memory.keep(VerdictMemory.key(_request(tenant="acme")), True, "done")

    assert memory.recall(VerdictMemory.key(_request(tenant="globex")), 60) is None


def test_headers_other_than_credentials_do_not_change_the_key():
    assert VerdictMemory.key(_request(trace="t1")) == VerdictMemory.key(_request(trace="t2"))


def test_task_and_answer_cannot_trade_text_to_collide():
    assert VerdictMemory.key(_request(task="a\0b", reply="c")) != VerdictMemory.key(_request(task="a", reply="b\0c"))


def test_a_verdict_older_than_the_allowed_age_is_not_recalled():
    clock = Clock()
    memory = VerdictMemory(clock=clock)
    memory.keep(VerdictMemory.key(_request()), True, "done")
    clock.now = 61.0

    assert memory.recall(VerdictMemory.key(_request()), 60) is None


def test_the_memory_forgets_its_oldest_verdicts_beyond_capacity():
    memory = VerdictMemory(capacity=2, clock=Clock())
    keys = [VerdictMemory.key(_request(reply=f"answer {i}")) for i in range(3)]
    for key in keys:
        memory.keep(key, True, "done")

    assert [memory.recall(key, 60) is not None for key in keys] == [False, True, True]


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        (CHAT_COMPLETIONS, [("content-type", "application/json"), ("authorization", "Bearer sk-judge")]),
        (RESPONSES, [("content-type", "application/json"), ("authorization", "Bearer sk-judge")]),
        (
            MESSAGES,
            [("content-type", "application/json"), ("x-api-key", "sk-judge"), ("anthropic-version", "2023-06-01")],
        ),
    ],
    ids=["chat", "responses", "messages"],
)
def test_a_judge_with_its_own_key_sends_it_as_its_format_takes_keys(monkeypatch, wire, expected):
    monkeypatch.setenv("JUDGE_KEY", "sk-judge")
    policy = Policy(judge={"base_url": "http://judge/v1", "api_key_env": "JUDGE_KEY"})

    target = judge_target(agent_request(policy=policy, wire=wire))

    assert target is not None
    assert list(target.headers) == expected
    assert target.url == "http://judge/v1" + wire.upstream_path
