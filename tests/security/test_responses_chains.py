"""Stored Responses chains under attack: response ids and the proxy's own items never cross
tenants, and no body of references turns into unbounded store traffic. Real Redis."""

from __future__ import annotations

import json

import httpx
import pytest

from proxy.session.chains import MAX_REFERENCES
from tests.support.assertions import assert_openai_error
from tests.support.fake_responses import message, response, text_response

KEYS = {"alpha": "lw-alpha-" + "1" * 24, "beta": "lw-beta-" + "2" * 24}
REQUEST = {"model": "m", "instructions": "You research."}


@pytest.fixture
def tenants_proxy(make_proxy, fake, write_tenants, write_policies, redis_url):
    policy = "empty_response_max_strikes: 1\nfinalize: {use_upstream: false}\n"
    return make_proxy(
        upstream=fake.url,
        tenants_file=write_tenants(KEYS),
        policies_dir=str(write_policies(default=policy)),
        redis_url=redis_url,
    )


def post(proxy, tenant: str, body: dict, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{proxy.base_url}/responses",
        json={**REQUEST, **body},
        headers={"Authorization": f"Bearer {KEYS[tenant]}", **headers},
    )


def test_another_tenant_can_neither_continue_a_response_nor_resolve_the_proxys_items(tenants_proxy, fake):
    fake.script(response(message("")))  # alpha's run ends: the proxy's own response, ids of its own
    ending = post(tenants_proxy, "alpha", {"input": "secret task of alpha"}, **{"X-Session-Id": "a1"}).json()
    assert ending["id"].startswith("resp_lw")
    item = ending["output"][0]["id"]

    fake.script(text_response("beta's own answer"))
    beta = post(
        tenants_proxy,
        "beta",
        {
            "previous_response_id": ending["id"],
            "input": [{"type": "item_reference", "id": item}, {"role": "user", "content": "go on"}],
        },
    )

    assert beta.status_code == 200
    assert beta.headers["x-loopwarden-session"] != "a1"
    assert "x-loopwarden-terminated" not in beta.headers  # alpha's ending is not beta's
    sent = json.dumps(fake.agent_payloads[-1])
    assert ending["output"][0]["content"][0]["text"] not in sent  # alpha's ending text never spliced in
    assert item not in sent  # the proxy's own ids never go upstream
    assert ending["id"] not in sent


def test_a_request_referring_to_more_proxy_responses_than_the_cap_is_refused(tenants_proxy, fake):
    references = [{"type": "item_reference", "id": f"msg_lw{n:032x}"} for n in range(MAX_REFERENCES + 1)]

    answer = post(tenants_proxy, "alpha", {"input": [{"role": "user", "content": "hi"}, *references]})

    assert_openai_error(answer, 400)
    assert answer.json()["error"]["param"] == "input"
    assert fake.agent_payloads == []


def test_a_request_referring_to_the_cap_of_proxy_responses_still_goes_through(tenants_proxy, fake):
    references = [{"type": "item_reference", "id": f"msg_lw{n:032x}"} for n in range(MAX_REFERENCES)]

    answer = post(tenants_proxy, "alpha", {"input": [{"role": "user", "content": "hi"}, *references]})

    assert answer.status_code == 200
    assert fake.agent_payloads[-1]["input"] == [{"role": "user", "content": "hi"}]  # unknown: dropped
