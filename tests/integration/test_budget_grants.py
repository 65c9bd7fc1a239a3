"""Budget grants over real HTTP (``PATCH /v1/loopwarden/sessions/{id}``), on memory, Redis and
Redis Cluster state, with two tenants: a budget's ending is lifted and the ended request served
anew; only the session's own key or its tenant's admin key may grant, within the policy's ceiling."""

from __future__ import annotations

import httpx
import pytest

from proxy.edge.tenants import hash_key
from tests.integration.test_observability import sample
from tests.support.assertions import assert_openai_error
from tests.support.fake_messages import said, text
from tests.support.fake_upstream import Json, chat_completion

MESSAGES = [{"role": "user", "content": "Summarize the quarterly report."}]
POLICY = "max_steps: 3\nbudgets: {grant_ceiling: {steps: 4}}\n"
TIGHT = "budgets: {max_tokens: 1000, grant_ceiling: {tokens: 2000, steps: 5}}\nfinalize: {max_tokens: 100}\n"
ACME, ACME_ADMIN, OTHER, OTHER_ADMIN = "lw-acme", "lw-acme-admin", "lw-other", "lw-other-admin"


def _tenants_file(tmp_path, monkeypatch) -> str:
    monkeypatch.setenv("PROVIDER_KEY", "sk-provider")
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: acme
    key_sha256: ["{hash_key(ACME)}"]
    admin_key_sha256: "{hash_key(ACME_ADMIN)}"
    upstream: {{api_key_env: PROVIDER_KEY}}
    policies: [default, tight]
  - name: other
    key_sha256: ["{hash_key(OTHER)}"]
    admin_key_sha256: "{hash_key(OTHER_ADMIN)}"
    upstream: {{api_key_env: PROVIDER_KEY}}
"""
    )
    return str(path)


@pytest.fixture(params=["memory", "redis", "cluster"])
def tenants(request, make_proxy, tmp_path, monkeypatch, write_policies):
    """A proxy with two tenants, each with an admin key, on the state store of the param."""
    state = {}
    if request.param == "redis":
        state = {"redis_url": request.getfixturevalue("redis_url")}
    elif request.param == "cluster":
        state = {"redis_url": request.getfixturevalue("redis_cluster").url, "redis_cluster": True}
    return make_proxy(
        tenants_file=_tenants_file(tmp_path, monkeypatch),
        policies_dir=str(write_policies(default=POLICY, tight=TIGHT)),
        **state,
    )


def headers(key: str, policy: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **({"X-LoopWarden-Policy": policy} if policy else {})}


def ask(proxy, session: str, key: str = ACME, policy: str | None = None) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES, "max_tokens": 100},
        headers={**headers(key, policy), "X-Session-Id": session},
        timeout=30,
    )


def grant(proxy, session: str, body: object, key: str = ACME, policy: str | None = None) -> httpx.Response:
    return httpx.patch(
        f"{proxy.base_url}/loopwarden/sessions/{session}", json=body, headers=headers(key, policy), timeout=30
    )


def costly(total: int, text: str) -> Json:
    body = chat_completion(text)
    body["usage"] = {"prompt_tokens": total // 2, "completion_tokens": total - total // 2, "total_tokens": total}
    return Json(body)


def end_by_steps(proxy, upstream, session: str) -> httpx.Response:
    """Two steps, then the third call is the budget_steps ending (its summary the last step)."""
    upstream.script(Json(chat_completion("Part one.")), Json(chat_completion("Part two.")))
    upstream.script(Json(chat_completion("Summary: two parts read.")))
    for _ in range(3):
        ended = ask(proxy, session)
    assert ended.headers["x-loopwarden-terminated"] == "budget_steps"
    return ended


def test_a_granted_budget_lifts_its_ending_and_the_ended_request_is_served_anew(tenants, upstream):
    end_by_steps(tenants, upstream, "lifted")
    assert ask(tenants, "lifted").headers["x-loopwarden-terminated"] == "budget_steps"  # the stored ending
    called = len(upstream.requests)
    upstream.script(Json(chat_completion("Part three.")))

    granted = grant(tenants, "lifted", {"steps": 2})
    served = ask(tenants, "lifted")

    assert (granted.status_code, granted.json()["termination"]) == (200, None)
    assert served.status_code == 200
    assert "x-loopwarden-terminated" not in served.headers
    assert served.json()["choices"][0]["message"]["content"] == "Part three."
    assert len(upstream.requests) == called + 1


def test_a_token_grant_lifts_a_token_ending(tenants, upstream):
    upstream.script(costly(400, "Part one."), costly(400, "Part two."), costly(115, "Summary: two parts read."))
    ended = [ask(tenants, "tokens", policy="tight") for _ in range(3)][-1]
    assert ended.headers["x-loopwarden-terminated"] == "budget_tokens"
    upstream.script(costly(300, "Part three."))

    granted = grant(tenants, "tokens", {"tokens": 1000}, policy="tight")
    served = ask(tenants, "tokens", policy="tight")

    assert granted.json()["grants"]["tokens"] == {"granted": 1000, "ceiling": 2000, "left": 1000}
    assert "x-loopwarden-terminated" not in served.headers
    assert served.json()["choices"][0]["message"]["content"] == "Part three."


def test_a_grant_of_another_budget_leaves_the_ending_in_place(tenants, upstream):
    upstream.script(costly(400, "Part one."), costly(400, "Part two."), costly(115, "Summary: two parts read."))
    for _ in range(3):
        ask(tenants, "other-budget", policy="tight")

    granted = grant(tenants, "other-budget", {"steps": 1}, policy="tight")

    assert (granted.status_code, granted.json()["termination"]) == (200, "budget_tokens")
    assert ask(tenants, "other-budget", policy="tight").headers["x-loopwarden-terminated"] == "budget_tokens"


def test_the_grant_answers_the_session_with_its_grants_and_budgets_left(tenants, upstream):
    end_by_steps(tenants, upstream, "shown")

    view = grant(tenants, "shown", {"steps": 3}).json()

    assert (view["object"], view["steps"], view["budget_remaining"]) == ("loopwarden.session", 3, "steps=3")
    assert view["grants"] == {"steps": {"granted": 3, "ceiling": 4, "left": 1}}


def test_a_grant_to_a_running_session_raises_its_budget(tenants, upstream):
    upstream.script(Json(chat_completion("Part one.")))
    ask(tenants, "running")

    view = grant(tenants, "running", {"steps": 4}).json()

    assert (view["termination"], view["budget_remaining"]) == (None, "steps=6")


def test_the_tenants_admin_key_may_grant_any_session_of_its_tenant(tenants, upstream):
    end_by_steps(tenants, upstream, "by-admin")

    granted = grant(tenants, "by-admin", {"steps": 1}, key=ACME_ADMIN)

    assert (granted.status_code, granted.json()["termination"]) == (200, None)


def test_the_tenants_admin_key_may_inspect_and_reset_its_tenants_sessions(tenants, upstream):
    upstream.script(Json(chat_completion("Part one.")))
    ask(tenants, "admin-reads")
    url = f"{tenants.base_url}/loopwarden/sessions/admin-reads"

    inspected = httpx.get(url, headers={"Authorization": f"Bearer {ACME_ADMIN}"})
    reset = httpx.delete(url, headers={"X-LoopWarden-Key": ACME_ADMIN})

    assert (inspected.status_code, inspected.json()["steps"]) == (200, 1)
    assert (reset.status_code, reset.json()["deleted"]) == (200, True)


def test_an_admin_key_calls_no_model(tenants, upstream):
    assert_openai_error(ask(tenants, "as-admin", key=ACME_ADMIN), 401, "invalid_api_key")
    assert upstream.requests == []


@pytest.mark.parametrize("key", [OTHER, OTHER_ADMIN], ids=["another-tenants-key", "another-tenants-admin-key"])
def test_another_tenants_key_cannot_grant_and_learns_nothing(tenants, upstream, key):
    end_by_steps(tenants, upstream, "private")

    refused = grant(tenants, "private", {"steps": 1}, key=key)

    assert_openai_error(refused, 404, "not_found")
    assert ask(tenants, "private").headers["x-loopwarden-terminated"] == "budget_steps"  # still ended


def test_a_grant_over_the_ceiling_is_a_409_saying_what_is_left_and_grants_nothing(tenants, upstream):
    end_by_steps(tenants, upstream, "capped")
    grant(tenants, "capped", {"steps": 3})

    refused = grant(tenants, "capped", {"steps": 2})

    assert_openai_error(refused, 409, "grant_over_ceiling")
    assert "1 more may be granted" in refused.json()["error"]["message"]
    assert refused.json()["error"]["param"] == "steps"
    assert grant(tenants, "capped", {"steps": 1}).json()["grants"]["steps"]["left"] == 0


@pytest.mark.parametrize(
    ("body", "param"),
    [
        pytest.param({"steps": 0}, "steps", id="zero"),
        pytest.param({"turns": 1}, "turns", id="unknown-budget"),
        pytest.param(["steps"], None, id="not-an-object"),
    ],
)
def test_a_bad_grant_is_a_400_naming_the_field(tenants, upstream, body, param):
    upstream.script(Json(chat_completion("Part one.")))
    ask(tenants, "bad-body")

    refused = grant(tenants, "bad-body", body)

    assert_openai_error(refused, 400)
    assert refused.json()["error"]["param"] == param


def test_a_budget_the_policy_does_not_set_is_a_409_after_the_session_is_found(tenants, upstream):
    upstream.script(Json(chat_completion("Part one.")))
    ask(tenants, "unset")

    refused = grant(tenants, "unset", {"tokens": 100})

    assert_openai_error(refused, 409, "grant_over_ceiling")
    assert "sets no tokens budget" in refused.json()["error"]["message"]
    assert_openai_error(grant(tenants, "unset", {"tokens": 100}, key=OTHER), 404, "not_found")


def test_a_grant_to_a_session_that_does_not_exist_is_404(tenants):
    assert_openai_error(grant(tenants, "never-seen", {"steps": 1}), 404, "not_found")


def test_grants_are_counted_by_tenant_policy_and_budget(tenants, upstream):
    end_by_steps(tenants, upstream, "counted")

    grant(tenants, "counted", {"steps": 1})
    grant(tenants, "counted", {"steps": 1}, key=ACME_ADMIN)

    metrics = httpx.get(f"{tenants.metrics_url}/metrics").text
    assert sample(metrics, "loopwarden_budget_grants_total", budget="steps", policy="default", tenant="acme") == 2.0


def test_a_grant_while_the_store_is_down_is_a_503(
    make_proxy, upstream, tmp_path, monkeypatch, write_policies, private_redis
):
    proxy = make_proxy(
        tenants_file=_tenants_file(tmp_path, monkeypatch),
        policies_dir=str(write_policies(default=POLICY, tight=TIGHT)),
        redis_url=private_redis.url,
        redis_timeout=0.3,
    )
    upstream.script(Json(chat_completion("Part one.")))
    ask(proxy, "down")
    private_redis.freeze()

    assert_openai_error(grant(proxy, "down", {"steps": 1}), 503, "service_unavailable")


def test_a_lifted_messages_session_is_served_anew_for_the_key_that_made_it(
    make_proxy, anthropic_upstream, write_policies
):
    proxy = make_proxy(upstream=anthropic_upstream.url, policies_dir=str(write_policies(default=POLICY)))
    parts = ("Part one.", "Part two.", "Summary: two parts read.", "Part three.")
    anthropic_upstream.script(*(said(text(part)) for part in parts))
    sent = {"model": "claude", "max_tokens": 100, "messages": MESSAGES}

    def ask_messages(key: str) -> httpx.Response:
        caller = {"x-api-key": key, "anthropic-version": "2023-06-01", "X-Session-Id": "claude-lifted"}
        return httpx.post(f"{proxy.url}/v1/messages", json=sent, headers=caller, timeout=30)

    ended = [ask_messages("sk-ant-owner") for _ in range(3)][-1]
    someone_else = httpx.patch(
        f"{proxy.base_url}/loopwarden/sessions/claude-lifted", json={"steps": 2}, headers={"x-api-key": "sk-ant-x"}
    )
    granted = httpx.patch(
        f"{proxy.base_url}/loopwarden/sessions/claude-lifted", json={"steps": 2}, headers={"x-api-key": "sk-ant-owner"}
    )
    served = ask_messages("sk-ant-owner")

    assert ended.headers["x-loopwarden-terminated"] == "budget_steps"
    assert (someone_else.status_code, granted.status_code) == (404, 200)
    assert "x-loopwarden-terminated" not in served.headers
    assert served.json()["content"] == [text("Part three.")]
