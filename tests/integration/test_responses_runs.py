"""Responses chains continued from an ending, over real HTTP with the openai SDK: the ending's id
continues at the ended request's chain point with that request's tool outputs carried, so the
upstream gets a valid request (no "No tool output found"), and a new question starts a new
run. Memory and Redis state; after a reset through the sessions API too."""

from __future__ import annotations

import itertools
import uuid

import httpx
import openai
import pytest

from tests.support.fake_responses import function_call, reasoning, response, text_response
from tests.support.responses_clients import run_agent
from tests.support.responses_fixtures import fake, responses_server  # noqa: F401 (fixtures)

TOOLS = [{"type": "function", "name": "search", "parameters": {"type": "object"}}]
TASK = [{"role": "user", "content": "How many people live in Lyon?"}]


@pytest.fixture(params=["memory", "redis"])
def proxy(request, make_proxy, fake, redis_url):
    return make_proxy(upstream=fake.url, **({"redis_url": redis_url} if request.param == "redis" else {}))


def looping(fake) -> None:
    fake.script(
        *[response(reasoning("Search."), function_call("search", '{"q": "lyon"}', f"c{n}")) for n in range(7)],
        text_response("Lyon: ~520k. Missing: a source."),
    )


def ended_chain(client: openai.OpenAI, fake, session: str):
    """A chained run (``previous_response_id``) ended by the loop guard: its ending's response."""
    looping(fake)
    counter = itertools.count()
    _, headers, ending, _ = run_agent(
        client,
        lambda call: f"result #{next(counter)}",
        TASK,
        chained=True,
        model="m",
        tools=TOOLS,
        extra_headers={"X-Session-Id": session},
    )
    assert headers["x-loopwarden-terminated"] == "loop"
    return ending


@pytest.mark.parametrize("reset", [False, True], ids=["continued", "after-a-reset"])
def test_a_new_question_continuing_an_ending_reaches_the_upstream_as_a_valid_request(proxy, fake, reset):
    client = openai.OpenAI(base_url=proxy.base_url, api_key="sk-p", max_retries=0)
    session = f"chain-{uuid.uuid4().hex}"
    ending = ended_chain(client, fake, session)
    if reset:
        url = f"{proxy.base_url}/loopwarden/sessions/{session}"
        assert httpx.delete(url, headers={"Authorization": "Bearer sk-p"}).status_code in (200, 204)
    fake.script(text_response("Lyon has 522,250 inhabitants (INSEE)."))

    raw = client.responses.with_raw_response.create(
        model="m",
        tools=TOOLS,
        previous_response_id=ending.id,
        input=[{"role": "user", "content": "Which source says so?"}],
        extra_headers={"X-Session-Id": session},
    )

    assert fake.rejections == []
    assert "x-loopwarden-terminated" not in raw.headers
    assert raw.parse().output_text == "Lyon has 522,250 inhabitants (INSEE)."
    sent = fake.agent_payloads[-1]["input"]
    assert [item.get("type") for item in sent[:-2]].count("function_call_output") >= 1


def test_the_agents_sdk_running_one_task_three_times_under_one_session_id_is_never_warned(proxy, fake):
    from tests.integration.test_responses_agents import run_agent as run_agents_sdk
    from tests.integration.test_responses_agents import weather_call

    fake.script(*[reply for n in range(3) for reply in (weather_call(f"c{n}"), text_response("Paris: 21 °C."))])
    session = f"thrice-{uuid.uuid4().hex}"

    runs = [run_agents_sdk(proxy.base_url, stream=False, session=session) for _ in range(3)]

    assert [output for output, _ in runs] == ["Paris: 21 °C."] * 3
    assert [run.tool_calls for _, run in runs] == [["Paris"]] * 3  # no warning took the third run's call
    assert len(fake.requests) == 6


def test_the_agents_sdk_asking_anew_after_an_ending_starts_a_new_run(proxy, fake):
    from tests.integration.test_responses_agents import run_agent as run_agents_sdk
    from tests.integration.test_responses_agents import weather_call

    session = f"anew-{uuid.uuid4().hex}"
    fake.script(*[weather_call(f"c{n}") for n in range(7)], text_response("Paris: 21 °C. I stopped."))
    ended, _ = run_agents_sdk(proxy.base_url, stream=False, session=session)
    assert ended.startswith("LoopWarden stopped this run (loop): get_weather was called")
    fake.script(weather_call("d1"), text_response("Paris: 21 °C."))

    output, _ = run_agents_sdk(proxy.base_url, stream=False, session=session)

    assert output == "Paris: 21 °C."
    assert fake.rejections == []
