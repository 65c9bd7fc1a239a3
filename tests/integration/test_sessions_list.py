"""The sessions API lists a caller's sessions and serves their timelines, over real HTTP, on
memory, Redis and Redis Cluster state: newest first, filtered, paged by cursor, never another
tenant's or another caller's, errors in the API's shape."""

from __future__ import annotations

import uuid

import httpx
import pytest

from proxy.edge.tenants import hash_key
from tests.support.assertions import assert_openai_error
from tests.support.fake_upstream import Json, chat_completion

ACME_KEY = "lw-acme-list-1"
ACME_ADMIN = "lw-acme-admin-1"
BYOK_KEY = "lw-byok-list-1"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(params=["memory", "redis", "cluster"])
def state(request, redis_url) -> dict[str, object]:
    """Where the proxy keeps its state (tenant names are unique per test: Redis is shared)."""
    if request.param == "memory":
        return {}
    if request.param == "cluster":
        return {"redis_url": request.getfixturevalue("redis_cluster").url, "redis_cluster": True}
    return {"redis_url": redis_url}


@pytest.fixture
def tenants(make_proxy, upstream, tmp_path, monkeypatch, state, write_policies):
    """Two tenants (acme with an admin key and two policies; byok bringing its own key)."""
    monkeypatch.setenv("ACME_PROVIDER_KEY", "sk-acme-provider")
    suffix = uuid.uuid4().hex[:8]
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: acme{suffix}
    key_sha256: ["{hash_key(ACME_KEY)}"]
    admin_key_sha256: "{hash_key(ACME_ADMIN)}"
    upstream: {{base_url: "{upstream.url}", api_key_env: ACME_PROVIDER_KEY}}
    policies: [default, capped]
  - name: byok{suffix}
    key_sha256: ["{hash_key(BYOK_KEY)}"]
    upstream: {{forward_client_key: true}}
"""
    )
    policies = write_policies(default="max_steps: 50\n", capped="max_steps: 1\n")
    return make_proxy(tenants_file=str(path), policies_dir=str(policies), **state)


ACME = {"Authorization": f"Bearer {ACME_KEY}"}
ADMIN = {"Authorization": f"Bearer {ACME_ADMIN}"}
BYOK = {"Authorization": "Bearer sk-byok-provider", "X-LoopWarden-Key": BYOK_KEY}


def call(proxy, headers: dict[str, str], session: str, **extra: str) -> httpx.Response:
    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": MESSAGES},
        headers={**headers, "X-Session-Id": session, **extra},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response


def listing(proxy, headers: dict[str, str], **query: object) -> dict:
    response = httpx.get(f"{proxy.base_url}/loopwarden/sessions", params=query, headers=headers, timeout=10)
    assert response.status_code == 200, response.text
    return response.json()


def ids(page: dict) -> list[str]:
    return [item["id"] for item in page["data"]]


def test_a_tenant_lists_its_own_sessions_newest_first_and_never_another_tenants(tenants, upstream):
    upstream.script(*[Json(chat_completion())] * 3)
    call(tenants, ACME, "first")
    call(tenants, BYOK, "theirs")
    call(tenants, ACME, "second")

    acme, byok = listing(tenants, ACME), listing(tenants, BYOK)

    assert (ids(acme), ids(byok)) == (["second", "first"], ["theirs"])
    assert acme["next_cursor"] is None


def test_a_listed_session_shows_its_state_policy_client_and_counters(tenants, upstream):
    upstream.script(Json(chat_completion(usage=(11, 7))))
    call(tenants, ACME, "s1", **{"User-Agent": "codex_exec/0.46.0 (Linux)"})

    [item] = listing(tenants, ACME)["data"]

    assert {k: item[k] for k in ("object", "state", "termination", "policy", "client", "steps", "turns")} == {
        "object": "loopwarden.session.summary",
        "state": "running",
        "termination": None,
        "policy": "default",
        "client": "codex_exec",
        "steps": 1,
        "turns": 1,
    }
    assert item["tokens"] == {"prompt": 11, "completion": 7, "total": 18}
    assert item["events"] >= 1


def test_the_tenants_admin_key_lists_the_tenants_sessions(tenants, upstream):
    upstream.script(*[Json(chat_completion())] * 2)
    call(tenants, ACME, "a1")
    call(tenants, BYOK, "b1")

    assert ids(listing(tenants, ADMIN)) == ["a1"]


def test_the_admin_key_calls_no_model(tenants, upstream):
    response = httpx.post(
        f"{tenants.base_url}/chat/completions", json={"model": "m", "messages": MESSAGES}, headers=ADMIN, timeout=10
    )

    assert_openai_error(response, 401, "invalid_api_key")
    assert upstream.requests == []


def test_the_list_is_filtered_by_state_reason_policy_and_client(tenants, upstream):
    upstream.script(*[Json(chat_completion())] * 4)
    call(tenants, ACME, "plain", **{"User-Agent": "claude-cli/2.0"})
    capped = {"X-LoopWarden-Policy": "capped"}
    call(tenants, ACME, "ended", **capped)
    call(tenants, ACME, "ended", **capped)  # over max_steps: the session ends

    assert ids(listing(tenants, ACME, state="ended")) == ["ended"]
    assert ids(listing(tenants, ACME, state="running")) == ["plain"]
    assert ids(listing(tenants, ACME, reason="budget_steps")) == ["ended"]
    assert ids(listing(tenants, ACME, policy="default")) == ["plain"]
    assert ids(listing(tenants, ACME, client="claude-cli")) == ["plain"]


def test_the_list_is_filtered_by_time(tenants, upstream):
    upstream.script(Json(chat_completion()))
    call(tenants, ACME, "s1")
    [item] = listing(tenants, ACME)["data"]

    assert ids(listing(tenants, ACME, since=item["last_seen"])) == ["s1"]
    assert ids(listing(tenants, ACME, since=item["last_seen"] + 1)) == []
    assert ids(listing(tenants, ACME, until=item["last_seen"] - 1)) == []


@pytest.mark.parametrize(
    ("query", "listed"),
    [({"since": -1e300}, ["s1"]), ({"until": 1e300}, ["s1"]), ({"until": -5}, []), ({"since": 1e300}, [])],
    ids=["since-before-time", "until-after-time", "until-before-time", "since-after-time"],
)
def test_any_number_is_a_time_clamped_to_the_epochs_range(tenants, upstream, query, listed):
    upstream.script(Json(chat_completion()))
    call(tenants, ACME, "s1")

    assert ids(listing(tenants, ACME, **query)) == listed


def test_the_list_pages_by_an_opaque_cursor(tenants, upstream):
    upstream.script(*[Json(chat_completion())] * 3)
    for session in ("s1", "s2", "s3"):
        call(tenants, ACME, session)

    first = listing(tenants, ACME, limit=2)
    rest = listing(tenants, ACME, limit=2, cursor=first["next_cursor"])

    assert (ids(first), ids(rest), rest["next_cursor"]) == (["s3", "s2"], ["s1"], None)


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"state": "paused"}, "state"),
        ({"since": "yesterday"}, "since"),
    ],
    ids=["bad-cursor", "limit-zero", "limit-not-a-number", "unknown-state", "since-not-a-number"],
)
def test_a_bad_query_is_a_400_invalid_request_naming_the_parameter(tenants, query, param):
    response = httpx.get(f"{tenants.base_url}/loopwarden/sessions", params=query, headers=ACME, timeout=10)

    error = assert_openai_error(response, 400)
    assert (error["type"], error["param"]) == ("invalid_request_error", param)
    assert param in error["message"]


def test_the_list_needs_a_key(tenants):
    response = httpx.get(f"{tenants.base_url}/loopwarden/sessions", timeout=10)

    assert_openai_error(response, 401, "invalid_api_key")


def test_without_a_tenants_file_each_caller_lists_only_its_own_sessions(make_proxy, upstream, state):
    proxy = make_proxy(**state)
    upstream.script(*[Json(chat_completion())] * 2)
    one, two = (
        {"Authorization": f"Bearer sk-one-{uuid.uuid4().hex}"},
        {"Authorization": f"Bearer sk-two-{uuid.uuid4().hex}"},
    )
    call(proxy, one, "mine")
    call(proxy, two, "yours")

    assert (ids(listing(proxy, one)), ids(listing(proxy, two))) == (["mine"], ["yours"])


# -- the timeline -------------------------------------------------------------------------


def events(proxy, headers: dict[str, str], session: str, **query: object) -> httpx.Response:
    return httpx.get(
        f"{proxy.base_url}/loopwarden/sessions/{session}/events", params=query, headers=headers, timeout=10
    )


def test_a_sessions_events_are_its_steps_and_interventions_oldest_first(tenants, upstream):
    upstream.script(Json(chat_completion("")), Json(chat_completion("Here it is.")))
    call(tenants, ACME, "nudged")

    timeline = events(tenants, ACME, "nudged").json()

    assert [(e["seq"], e["kind"]) for e in timeline["data"]] == [(0, "step"), (1, "intervention"), (2, "step")]
    step, intervention = timeline["data"][0]["fields"], timeline["data"][1]["fields"]
    assert (step["attempt"], step["tokens_in"], step["verdict"]) == (1, 11, "empty_nudge")
    assert (intervention["guard"], intervention["action"]) == ("empty_reply", "empty_nudge")
    assert (timeline["total"], timeline["dropped"], timeline["next_cursor"]) == (3, 0, None)
    assert "Here it is." not in str(timeline)  # no contents without content logging


def test_the_timeline_pages_by_cursor(tenants, upstream):
    upstream.script(*[Json(chat_completion())] * 3)
    for _ in range(3):
        call(tenants, ACME, "long")

    first = events(tenants, ACME, "long", limit=2).json()
    rest = events(tenants, ACME, "long", limit=2, cursor=first["next_cursor"]).json()

    assert [e["seq"] for e in first["data"]] == [0, 1]
    assert ([e["seq"] for e in rest["data"]], rest["next_cursor"]) == ([2], None)


def test_another_tenants_timeline_is_a_404(tenants, upstream):
    upstream.script(Json(chat_completion()))
    call(tenants, ACME, "private")

    assert_openai_error(events(tenants, BYOK, "private"), 404, "not_found")
    assert events(tenants, ADMIN, "private").status_code == 200


def test_another_callers_timeline_is_a_404_without_a_tenants_file(make_proxy, upstream, state):
    proxy = make_proxy(**state)
    upstream.script(Json(chat_completion()))
    call(proxy, {"Authorization": "Bearer sk-owner"}, "owned")

    assert_openai_error(events(proxy, {"Authorization": "Bearer sk-other"}, "owned"), 404, "not_found")


def test_a_bad_timeline_cursor_is_a_400(tenants, upstream):
    upstream.script(Json(chat_completion()))
    call(tenants, ACME, "s1")

    error = assert_openai_error(events(tenants, ACME, "s1", cursor="bm9wZQ"), 400)

    assert error["param"] == "cursor"


def test_a_timeline_limit_that_is_no_number_is_a_400_naming_it(tenants, upstream):
    upstream.script(Json(chat_completion()))
    call(tenants, ACME, "s1")

    error = assert_openai_error(events(tenants, ACME, "s1", limit="many"), 400)

    assert (error["type"], error["param"]) == ("invalid_request_error", "limit")


def test_a_timeline_over_its_cap_keeps_its_newest_events_and_says_how_many_went(make_proxy, upstream, state):
    proxy = make_proxy(timeline_events=2, **state)
    owner = {"Authorization": f"Bearer sk-{uuid.uuid4().hex}"}
    upstream.script(*[Json(chat_completion())] * 3)
    for _ in range(3):
        call(proxy, owner, "capped")

    timeline = events(proxy, owner, "capped").json()

    assert [e["seq"] for e in timeline["data"]] == [1, 2]
    assert (timeline["total"], timeline["dropped"]) == (3, 1)
