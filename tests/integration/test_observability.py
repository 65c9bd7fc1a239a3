"""Observability: a scripted run through every guard family, then the exact metric samples,
log lines and headers it produced; the dashboard queries only metrics that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import openai
import pytest

from proxy.observe.logs import JsonFormatter
from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, chat_completion, tool_call, verdict

DASHBOARD = Path(__file__).parents[2] / "helm" / "loopwarden" / "dashboards" / "loopwarden.json"
SECRET_TEXT = "Population figures for Lyon, confidential draft 7731"
TOOLS = [
    {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "required": ["q"]}}},
    {"type": "function", "function": {"name": "run_shell", "parameters": {"type": "object"}}},
]
POLICY = """
max_attempts: 6
permissions:
  rules: [{id: no-shell, tool: run_shell, action: deny}]
budgets: {max_tokens: 100000}
"""


def calling(name, arguments, call_id):
    return Json(chat_completion(None, tool_calls=[tool_call(name, json.dumps(arguments), call_id)]))


@pytest.fixture
def observed(make_proxy, upstream, write_policies, log_records):
    """Drive one session through every guard family; return the proxy, metrics text and log lines."""
    proxy = make_proxy(policies_dir=str(write_policies(default=POLICY)))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-secret-provider-key", max_retries=0)
    task = [{"role": "user", "content": SECRET_TEXT}]

    def ask(messages, session="observed", **kwargs):
        return client.chat.completions.with_raw_response.create(
            model="m", messages=messages, tools=TOOLS, extra_headers={"X-Session-Id": session}, **kwargs
        )

    upstream.judge = lambda request: verdict(request, False, "incomplete")
    upstream.script(
        Json(chat_completion(None)),  # empty → nudge
        Json(chat_completion(None, reasoning="thinking")),  # reasoning-only → nudge
        calling("run_shell", {"cmd": "ls"}, "c1"),  # permission → refused
        calling("search", {"query": "lyon"}, "c2"),  # bad arguments → retry
        calling("search", {"q": "lyon"}, "c3"),  # good
    )
    first = ask(task)
    history = [*task, first.parse().choices[0].message.model_dump(exclude_none=True)]
    history.append({"role": "tool", "tool_call_id": "c3", "content": "Lyon: 522,250"})
    upstream.script(Json(chat_completion("Done.")), Json(chat_completion("Lyon: 522,250 people." * 20)))
    second = ask(history)  # the judge says not done → continue
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "required": ["n"]}},
    }
    upstream.script(Json(chat_completion("not json")), Json(chat_completion('{"n": 1}')))
    third = ask(task, session="observed-json", response_format=response_format)
    passthrough = httpx.get(f"{proxy.base_url}/models", headers={"Authorization": "Bearer sk-p"})
    error = httpx.post(f"{proxy.base_url}/chat/completions", content=b"{", headers={"Authorization": "Bearer sk-p"})
    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    lines = [json.loads(JsonFormatter().format(r)) for r in log_records]
    return {
        "replies": [first, second, third],
        "passthrough": passthrough,
        "error": error,
        "metrics": metrics,
        "logs": lines,
    }


def sample(metrics: str, name: str, **labels: str) -> float:
    """The value of one sample, labels matched exactly."""
    for line in metrics.splitlines():
        if not line.startswith(name + "{"):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line[len(name) : line.rindex("}") + 1]))
        if found == labels:
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name}{labels}")


GUARD_OF = {
    "empty_nudge": "empty_reply",
    "reasoning_nudge": "reasoning_only",
    "permission_denied": "permission",
    "tool_args_retry": "tool_args",
    "judge_continue": "premature_stop",
    "schema_retry": "output_contract",
}
INTERVENTIONS = list(GUARD_OF)


@pytest.mark.parametrize("kind", INTERVENTIONS)
def test_every_intervention_has_its_counter_by_guard_and_kind(observed, kind):
    labels = {"guard": GUARD_OF[kind], "kind": kind, "policy": "default", "tenant": "default"}

    assert sample(observed["metrics"], "loopwarden_interventions_total", **labels) == 1.0


@pytest.mark.parametrize("kind", INTERVENTIONS)
def test_every_intervention_has_a_log_line_with_its_reason(observed, kind):
    lines = [line for line in observed["logs"] if line["event"] == "intervention" and line["kind"] == kind]

    assert len(lines) == 1
    assert (lines[0]["guard"], bool(lines[0]["reason"])) == (GUARD_OF[kind], True)
    assert lines[0]["session"].startswith("observed")


def test_judge_verdicts_and_token_kinds_are_counted(observed):
    metrics = observed["metrics"]

    assert sample(metrics, "loopwarden_judge_verdicts_total", policy="default", verdict="not_done") == 1.0
    assert sample(metrics, "loopwarden_judge_verdicts_total", policy="default", verdict="skipped") == 1.0
    for kind in ("agent", "nudge", "judge"):
        for direction in ("prompt", "completion"):
            labels = {"kind": kind, "direction": direction, "policy": "default", "tenant": "default"}
            assert sample(metrics, "loopwarden_tokens_total", **labels) > 0


def test_permission_decisions_are_counted_by_rule(observed):
    assert (
        sample(
            observed["metrics"],
            "loopwarden_permission_decisions_total",
            action="deny",
            policy="default",
            rule="no-shell",
        )
        == 1.0
    )


def test_requests_are_counted_by_status(observed):
    metrics = observed["metrics"]

    assert sample(metrics, "loopwarden_requests_total", route="chat.completions", status="2xx", tenant="default") == 3.0
    assert (
        sample(metrics, "loopwarden_requests_total", route="passthrough:models", status="2xx", tenant="default") == 1.0
    )


def test_one_step_line_per_upstream_call_with_what_was_decided(observed):
    steps = [line for line in observed["logs"] if line["event"] == "step"]

    assert [s["verdict"] for s in steps[:5]] == [
        "empty_nudge",
        "reasoning_nudge",
        "permission_denied",
        "tool_args_retry",
        "pass",
    ]
    assert steps[4]["tools"] == ["search"]
    assert re.fullmatch(r"[0-9a-f]{16}", steps[4]["argument_digests"][0])
    assert {"tenant", "session", "step", "attempt", "latency_ms", "tokens_in", "tokens_out"} <= set(steps[0])
    assert steps[5]["tool_result_sizes"] == [len("Lyon: 522,250")]


def test_every_reply_carries_the_proxy_overhead(observed):
    for response in [*observed["replies"], observed["passthrough"], observed["error"]]:
        assert float(response.headers["x-loopwarden-overhead-ms"]) >= 0


def test_no_message_text_or_key_in_default_logs(observed):
    logged = json.dumps(observed["logs"])

    assert SECRET_TEXT not in logged
    assert "Lyon: 522,250" not in logged
    assert "sk-secret-provider-key" not in logged


def test_no_session_id_or_text_in_any_label(observed):
    labels = re.findall(r"\{([^}]*)\}", observed["metrics"])

    assert not any("observed" in label or "Lyon" in label for label in labels)


def test_dashboard_is_valid_json_with_queries(observed):
    dashboard = json.loads(DASHBOARD.read_text())

    assert dashboard["uid"] == "loopwarden"
    assert all(panel["targets"] for panel in dashboard["panels"])


def test_every_metric_the_dashboard_queries_exists(observed):
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"]]
    queried = {re.sub(r"_(bucket|total|count|sum)$", "", m) for e in exprs for m in re.findall(r"loopwarden_\w+", e)}
    exposed = {
        re.sub(r"_(total|created)$", "", m)
        for m in re.findall(r"^# TYPE (loopwarden_\w+) ", observed["metrics"], re.MULTILINE)
    }

    assert queried
    assert queried <= exposed, queried - exposed


def test_endings_and_budget_notes_are_counted_and_logged(make_proxy, upstream, write_policies, log_records):
    proxy = make_proxy(policies_dir=str(write_policies(default="max_steps: 3\nbudgets: {converge_share: 0.5}\n")))
    client = openai.OpenAI(
        base_url=proxy.base_url, api_key="sk-p", max_retries=0, default_headers={"X-Session-Id": "ending"}
    )
    upstream.script(*[Json(chat_completion("step")) for _ in range(3)], Json(chat_completion("Summary.")))

    for _ in range(4):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "go"}])

    metrics = httpx.get(f"{proxy.metrics_url}/metrics").text
    assert (
        sample(metrics, "loopwarden_terminations_total", policy="default", reason="budget_steps", tenant="default")
        == 1.0
    )
    assert (
        sample(
            metrics,
            "loopwarden_interventions_total",
            guard="budget",
            kind="budget_note",
            policy="default",
            tenant="default",
        )
        == 1.0
    )
    endings = [r for r in log_records if r.getMessage() == "termination"]
    assert [r.fields["reason"] for r in endings] == ["budget_steps"]


def test_metrics_are_not_served_on_the_api_port(proxy):
    response = httpx.get(f"{proxy.url}/metrics")

    assert_openai_error(response, 404, "not_found")


def test_metrics_are_served_on_their_own_listener(proxy, upstream):
    upstream.script(Json(chat_completion()))
    httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": "Bearer sk-p"},
    )

    response = httpx.get(f"{proxy.metrics_url}/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'loopwarden_requests_total{route="chat.completions",status="2xx",tenant="default"} 1.0' in response.text


def test_the_metrics_listener_is_on_loopback_by_default():
    from proxy.settings import Settings

    assert Settings(upstream="http://u").metrics_host == "127.0.0.1"


def test_metrics_and_api_on_one_port_is_refused():
    from pydantic import ValidationError

    from proxy.settings import Settings

    assert Settings(upstream="http://u", port=8080, metrics_port=9000).metrics_port == 9000
    with pytest.raises(ValidationError, match="metrics_port must differ"):
        Settings(upstream="http://u", port=8080, metrics_port=8080)


def test_upstream_calls_are_counted_by_purpose(observed):
    metrics = observed["metrics"]

    def calls(purpose: str) -> float:
        return sample(metrics, "loopwarden_upstream_calls_total", purpose=purpose, policy="default", tenant="default")

    assert (calls("agent"), calls("nudge"), calls("judge")) == (3.0, 6.0, 1.0)


def test_an_error_after_authentication_is_counted_against_the_tenant(observed):
    metrics = observed["metrics"]

    assert sample(metrics, "loopwarden_requests_total", route="chat.completions", status="4xx", tenant="default") == 1
    assert 'tenant="-"' not in metrics
    (line,) = [line for line in observed["logs"] if line["event"] == "request" and line["status"] == 400]
    assert line["tenant"] == "default"


def _first_byte_count(proxy) -> float:
    for line in httpx.get(f"{proxy.metrics_url}/metrics").text.splitlines():
        if line.startswith("loopwarden_stream_first_byte_seconds_count "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no loopwarden_stream_first_byte_seconds_count")


def test_time_to_first_byte_is_observed_for_a_stream_sent_in_one_go(proxy, upstream):
    empty = Json(chat_completion(None))
    upstream.script(empty, empty, empty, Json(chat_completion("The ending.")))
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    headers = {"X-Session-Id": "ended"}
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], extra_headers=headers)
    before = _first_byte_count(proxy)

    replayed = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "x"}], extra_headers=headers, stream=True
    )
    text = "".join(chunk.choices[0].delta.content or "" for chunk in replayed if chunk.choices)

    assert text  # the ending, replayed as a stream without calling upstream
    assert (before, _first_byte_count(proxy)) == (0.0, 1.0)
