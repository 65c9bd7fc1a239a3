"""What the loop tells the outside: a log line per step (never what was said unless asked), a
metric sample and a log line per decision, what guards saw counted, and the response headers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from proxy.exchange import Reply, ToolCall, Usage
from proxy.guards.fingerprint import fingerprint
from proxy.loop.recording import Step
from proxy.loop.step_log import StepLog, chat_attributes, response_headers, usage_attributes
from proxy.observe.metrics import Metrics
from proxy.observe.tracing import Tracing
from proxy.policy.models import Policy, RecordingSettings
from proxy.request import RequestNotes
from proxy.session.base import SessionDelta, SessionState
from proxy.verdict import JudgeCall, Nudge, Pass, PermissionCheck
from tests.support.agent_request import agent_request
from tests.unit.guards.given import context

POLICY = Policy(max_steps=10)
REQUEST = agent_request(policy=POLICY, tenant="acme")
AFTER = SessionState({"steps": "3"})
BASE_HEADERS = [
    (b"x-loopwarden-session", REQUEST.session.id.encode()),
    (b"x-loopwarden-policy", b"default"),
    (b"x-loopwarden-step", b"3"),
]


class Recorder:
    def __init__(self) -> None:
        self.steps: list[Step] = []

    def record(self, step: Step) -> None:
        self.steps.append(step)


def step_log(metrics: Metrics | None = None, *, log_contents: bool = False, recorder: Recorder | None = None):
    return StepLog(metrics or Metrics(), Tracing(), log_contents=log_contents, recorder=recorder)


def count(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def notes(**values: object) -> RequestNotes:
    made = RequestNotes(started=0.0)
    for name, value in values.items():
        setattr(made, name, value)
    return made


HEADER_CASES = [
    # what happened on the request, the headers after the base ones
    pytest.param(notes(), [(b"x-loopwarden-interventions", b"none")], id="nothing-happened"),
    pytest.param(
        notes(interventions=["tool_loop", "judge"]), [(b"x-loopwarden-interventions", b"tool_loop,judge")], id="nudged"
    ),
    pytest.param(
        notes(terminated="max_steps"),
        [(b"x-loopwarden-interventions", b"none"), (b"x-loopwarden-terminated", b"max_steps")],
        id="ended",
    ),
    pytest.param(
        notes(shadow=["tool_loop"], flags=["tool_args_invalid"]),
        [
            (b"x-loopwarden-interventions", b"none"),
            (b"x-loopwarden-shadow", b"tool_loop"),
            (b"x-loopwarden-flags", b"tool_args_invalid"),
        ],
        id="shadowed-and-flagged",
    ),
    pytest.param(
        notes(degraded=True, goal="met"),
        [
            (b"x-loopwarden-interventions", b"none"),
            (b"x-loopwarden-degraded", b"state-store"),
            (b"x-loopwarden-goal", b"met"),
        ],
        id="degraded-in-goal-mode",
    ),
]


@pytest.mark.parametrize(("happened", "headers"), HEADER_CASES)
def test_the_response_headers_tell_the_session_after_the_request_and_what_happened(happened, headers):
    sent = response_headers(REQUEST, AFTER, happened, 0.0)

    assert sent[:3] == BASE_HEADERS
    assert [h for h in sent[3:] if h[0] != b"x-loopwarden-budget-remaining"] == headers


def test_the_budget_header_shows_what_remains_of_the_policys_budgets():
    sent = dict(response_headers(REQUEST, AFTER, notes(), 0.0))

    assert sent[b"x-loopwarden-budget-remaining"] == b"steps=7"


LOOP_WARNING = Nudge(kind="loop_warning", reason="x", turns=(), guard="tool_loop")


@pytest.mark.parametrize(
    ("decide", "noted", "metric", "labels"),
    [
        pytest.param(
            lambda log, n: log.intervention(REQUEST, LOOP_WARNING, n, 2, SessionDelta()),
            "interventions",
            "interventions",
            {"guard": "tool_loop"},
        ),
        pytest.param(
            lambda log, n: log.shadow(REQUEST, LOOP_WARNING, n, SessionDelta()),
            "shadow",
            "shadow_decisions",
            {"guard": "tool_loop"},
        ),
        pytest.param(lambda log, n: log.flag(REQUEST, "loop_warning", n), "flags", "flags", {}),
    ],
    ids=["intervention", "shadow", "flag"],
)
def test_each_decision_is_noted_counted_by_guard_and_kind_and_logged(decide, noted, metric, labels, log_records):
    metrics, happened = Metrics(), notes()

    decide(step_log(metrics), happened)

    assert getattr(happened, noted) == ["loop_warning"]
    assert (
        count(metrics, f"loopwarden_{metric}_total", tenant="acme", policy="default", kind="loop_warning", **labels)
        == 1
    )
    logged = [r for r in log_records if r.msg != "step"]
    assert [(r.fields.get("guard"), r.fields["kind"], r.fields["session"]) for r in logged] == [
        (labels.get("guard"), "loop_warning", REQUEST.session.id)
    ]


def test_what_the_guards_saw_is_counted_by_kind():
    metrics = Metrics()
    seen = (PermissionCheck("no-rm", "deny"), JudgeCall("not_done", 0.5), JudgeCall("error", None, "timeout"))

    step_log(metrics).observed(REQUEST, "premature_stop", Pass(seen=seen), SessionDelta())

    assert count(metrics, "loopwarden_permission_decisions_total", policy="default", rule="no-rm", action="deny") == 1
    assert count(metrics, "loopwarden_judge_verdicts_total", policy="default", verdict="not_done") == 1
    assert count(metrics, "loopwarden_judge_verdicts_total", policy="default", verdict="error") == 1
    assert count(metrics, "loopwarden_judge_errors_total", policy="default", cause="timeout") == 1
    assert count(metrics, "loopwarden_judge_latency_seconds_count", policy="default") == 1  # the one that asked
    assert count(metrics, "loopwarden_upstream_calls_total", tenant="acme", policy="default", purpose="judge") == 1


def test_a_verdict_that_saw_nothing_counts_nothing():
    metrics = Metrics()

    step_log(metrics).observed(REQUEST, "premature_stop", None, SessionDelta())

    assert count(metrics, "loopwarden_judge_verdicts_total", policy="default", verdict="done") == 0


SAID = Reply(
    "My key is sk-abcdefghijklmnopqrstuvwx.", None, (ToolCall("c1", "search", "{}"),), "tool_calls", Usage(7, 3)
)


def a_step(recorded: Recorder | None = None, delta: SessionDelta | None = None, request=REQUEST, **log: bool) -> Step:
    step = Step(request, context(POLICY, AFTER), 1, SAID, None, 0.25, notes())
    step_log(recorder=recorded, **log).step(step, SessionDelta() if delta is None else delta)
    return step


def test_a_step_is_one_log_line_of_what_was_asked_and_decided_without_what_was_said(log_records):
    a_step()

    [line] = [r.fields for r in log_records if r.msg == "step"]
    assert (line["step"], line["attempt"], line["tools"], line["tokens_in"], line["tokens_out"]) == (
        3,
        1,
        ["search"],
        7,
        3,
    )
    assert (line["latency_ms"], line["verdict"]) == (250.0, "pass")
    assert "reply" not in line


def test_contents_are_logged_when_asked_with_keys_redacted(log_records):
    a_step(log_contents=True)

    [line] = [r.fields for r in log_records if r.msg == "step"]
    assert line["reply"] == "My key is [REDACTED]."


def test_every_step_goes_to_the_recorder_when_a_policy_records():
    recorded = Recorder()

    step = a_step(recorded)

    assert recorded.steps == [step]


def test_span_attributes_follow_the_genai_conventions():
    assert chat_attributes(REQUEST, 2) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m",
        "loopwarden.attempt": 2,
    }
    assert usage_attributes(SAID) == {
        "gen_ai.response.model": "",
        "gen_ai.usage.input_tokens": 7,
        "gen_ai.usage.output_tokens": 3,
    }


# -- the timeline ---------------------------------------------------------------------


def test_a_step_is_a_timeline_event_of_the_call_without_what_was_said():
    delta = SessionDelta()

    a_step(delta=delta)

    [event] = delta.events
    assert event.kind == "step"
    assert event.fields == {
        "step": 3,
        "attempt": 1,
        "model": None,
        "latency_ms": 250.0,
        "tokens_in": 7,
        "tokens_out": 3,
        "tools": "search",
        "argument_digests": fingerprint("search", "{}"),
        "verdict": "pass",
    }


@pytest.mark.parametrize(
    ("log_contents", "recording"),
    [pytest.param(True, False, id="content-logging"), pytest.param(False, True, id="recording")],
)
def test_a_steps_event_keeps_the_reply_redacted_where_contents_are_kept(log_contents, recording):
    delta = SessionDelta()
    policy = POLICY.model_copy(update={"recording": RecordingSettings(enabled=recording, jsonl_path="r.jsonl")})

    a_step(delta=delta, request=agent_request(policy=policy, tenant="acme"), log_contents=log_contents)

    assert delta.events[0].fields["reply"] == "My key is [REDACTED]."


def test_decisions_are_timeline_events_with_guard_action_and_reason():
    delta = SessionDelta()
    judged = Nudge(kind="judge_continue", reason="not done", turns=(), guard="premature_stop")

    step_log().intervention(REQUEST, replace(LOOP_WARNING, reason="same call 3 times"), notes(), 2, delta)
    step_log().shadow(REQUEST, judged, notes(), delta)

    assert [(e.kind, dict(e.fields)) for e in delta.events] == [
        (
            "intervention",
            {
                "guard": "tool_loop",
                "action": "loop_warning",
                "reason": "same call 3 times",
                "attempt": 2,
                "shadow": False,
            },
        ),
        ("intervention", {"guard": "premature_stop", "action": "judge_continue", "reason": "not done", "shadow": True}),
    ]


def test_a_judge_call_is_a_timeline_event_with_the_guard_that_asked_its_verdict_and_latency():
    delta = SessionDelta()
    seen = (JudgeCall("not_done", 0.5), JudgeCall("error", None, "timeout"))

    step_log().observed(REQUEST, "premature_stop", Pass(seen=seen), delta)

    assert [dict(e.fields) for e in delta.events] == [
        {"guard": "premature_stop", "verdict": "not_done", "latency_ms": 500.0, "error": None, "then": "pass"},
        {"guard": "premature_stop", "verdict": "error", "latency_ms": None, "error": "timeout", "then": "pass"},
    ]


@pytest.mark.parametrize(("tries", "events"), [(1, []), (3, [{"attempt": 1, "upstream_attempts": 3, "status": 200}])])
def test_an_upstream_call_retried_is_a_timeline_event(tries, events):
    delta = SessionDelta()

    step_log().retried(REQUEST, 1, tries, 200, delta)

    assert [dict(e.fields) for e in delta.events] == events
