"""The real google-genai SDK, pointed at the proxy (``http_options.base_url``), works exactly
as against the Gemini API: plain, streamed, calling functions, answering in a JSON schema."""

from __future__ import annotations

import json

import httpx
import pytest
from google import genai
from google.genai import types

from tests.support.assertions import summary_of
from tests.support.fake_gemini import MISSING_SIGNATURE, signature
from tests.support.fake_upstream import Json
from tests.support.turns import Turn, calling

MODEL = "gemini-fake"


def client_for(proxy, *, api_version: str | None = None) -> genai.Client:
    options = types.HttpOptions(base_url=proxy.url, api_version=api_version) if api_version else None
    return genai.Client(api_key="gk-provider", http_options=options or types.HttpOptions(base_url=proxy.url))


WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters=types.Schema(type="OBJECT", properties={"city": types.Schema(type="STRING")}, required=["city"]),
)


def test_generate_content_gets_the_upstream_answer(make_proxy, gemini_upstream):
    gemini_upstream.script(Turn("It is sunny."))
    proxy = make_proxy(upstream=gemini_upstream.url)

    client = client_for(proxy)
    reply = client.models.generate_content(model=MODEL, contents="Weather in Paris?")

    assert reply.text == "It is sunny."
    sent = gemini_upstream.requests[0]
    assert sent.path == f"/v1/models/{MODEL}:generateContent"
    assert sent.header("x-goog-api-key") == "gk-provider"
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.total_token_count == 18


def test_a_stream_arrives_whole_in_order(make_proxy, gemini_upstream):
    gemini_upstream.script(Turn("It is sunny in Paris today."))
    proxy = make_proxy(upstream=gemini_upstream.url)

    client = client_for(proxy)
    pieces = list(client.models.generate_content_stream(model=MODEL, contents="Weather in Paris?"))

    assert "".join(piece.text or "" for piece in pieces) == "It is sunny in Paris today."
    assert pieces[-1].candidates[0].finish_reason == types.FinishReason.STOP
    sent = gemini_upstream.requests[0]
    assert sent.path == f"/v1/models/{MODEL}:streamGenerateContent"
    assert "alt=sse" in sent.query


def test_a_function_call_and_its_signature_go_round_trip(make_proxy, gemini_upstream):
    gemini_upstream.script(calling("get_weather", {"city": "Paris"}), Turn("Sunny, 21 degrees."))
    proxy = make_proxy(upstream=gemini_upstream.url)
    client = client_for(proxy)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[WEATHER])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    history = [types.Content(role="user", parts=[types.Part(text="Weather in Paris?")])]

    first = client.models.generate_content(model=MODEL, contents=history, config=config)
    call = first.function_calls[0]
    history += [
        first.candidates[0].content,
        types.Content(
            role="user",
            parts=[types.Part.from_function_response(name=call.name, response={"output": "21C, sunny"})],
        ),
    ]
    second = client.models.generate_content(model=MODEL, contents=history, config=config)

    assert (call.name, call.args) == ("get_weather", {"city": "Paris"})
    assert second.text == "Sunny, 21 degrees."
    assert gemini_upstream.rejected == []
    model_turn = gemini_upstream.requests[1].json()["contents"][1]
    assert model_turn["parts"][0]["thoughtSignature"] == signature("get_weather", {"city": "Paris"})


def test_a_json_schema_answer_is_relayed(make_proxy, gemini_upstream):
    gemini_upstream.script(Turn(json.dumps({"city": "Paris", "temperature": 21})))
    proxy = make_proxy(upstream=gemini_upstream.url)
    schema = {"type": "object", "properties": {"city": {"type": "string"}, "temperature": {"type": "integer"}}}

    client = client_for(proxy)
    reply = client.models.generate_content(
        model=MODEL,
        contents="Weather in Paris?",
        config=types.GenerateContentConfig(response_mime_type="application/json", response_json_schema=schema),
    )

    assert reply.parsed == {"city": "Paris", "temperature": 21}
    assert gemini_upstream.requests[0].json()["generationConfig"]["responseJsonSchema"] == schema


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_json_answer_the_guard_ends_reaches_the_sdk_as_an_other_finish_with_the_summary(
    make_proxy, gemini_upstream, stream
):
    """google-genai drops ``finishMessage`` on the Gemini API: the summary must be in a part it reads."""
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    summary = "Found: nothing that fits the schema. Missing: the city. Next step: ask again."
    gemini_upstream.script(*[Turn("About half a million people.") for _ in range(3)], Turn(summary))
    proxy = make_proxy(upstream=gemini_upstream.url)
    config = types.GenerateContentConfig(response_mime_type="application/json", response_json_schema=schema)

    client = client_for(proxy)
    if stream:
        pieces = list(client.models.generate_content_stream(model=MODEL, contents="Which city?", config=config))
    else:
        pieces = [client.models.generate_content(model=MODEL, contents="Which city?", config=config)]

    last = pieces[-1]
    assert last.candidates[0].finish_reason == types.FinishReason.OTHER
    assert summary_of("".join(p.text or "" for p in pieces)) == summary
    assert last.parsed is None


def test_the_v1_form_of_the_call_is_guarded_too(make_proxy, gemini_upstream):
    gemini_upstream.script(Turn("Hi."))
    proxy = make_proxy(upstream=gemini_upstream.url)

    client = client_for(proxy, api_version="v1")
    reply = client.models.generate_content(model=MODEL, contents="Hi?")

    assert reply.text == "Hi."
    assert reply.sdk_http_response is not None
    assert "x-loopwarden-session" in {k.lower() for k in (reply.sdk_http_response.headers or {})}


def test_count_tokens_is_passed_through(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url)

    client = client_for(proxy)
    counted = client.models.count_tokens(model=MODEL, contents="How many tokens is this?")

    assert counted.total_tokens
    assert counted.total_tokens > 0
    assert gemini_upstream.requests[0].path == f"/v1/models/{MODEL}:countTokens"


def test_a_key_in_the_query_string_goes_upstream_in_the_header(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url)
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi?"}]}]}

    reply = httpx.post(f"{proxy.url}/v1beta/models/{MODEL}:generateContent?key=gk-secret-in-query", json=body)

    assert reply.status_code == 200
    sent = gemini_upstream.requests[0]
    assert "gk-secret-in-query" not in sent.query
    assert sent.header("x-goog-api-key") == "gk-secret-in-query"


def test_a_proxy_error_is_in_googles_shape(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url)

    reply = httpx.post(
        f"{proxy.url}/v1beta/models/{MODEL}:generateContent", content=b"{not json", headers={"x-goog-api-key": "k"}
    )

    assert reply.status_code == 400
    error = reply.json()["error"]
    assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
    assert error["message"]


def test_a_call_sent_back_without_its_signature_is_refused_by_the_fake(make_proxy, gemini_upstream):
    proxy = make_proxy(upstream=gemini_upstream.url)
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "Weather?"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sun"}}}]},
        ]
    }

    reply = httpx.post(f"{proxy.url}/v1beta/models/{MODEL}:generateContent", json=body, headers={"x-goog-api-key": "k"})

    assert reply.status_code == 400
    assert MISSING_SIGNATURE in reply.json()["error"]["message"]


QUERY_KEY = "gk-secret-in-the-query-0042"


def test_a_key_in_the_query_string_reaches_no_log_metric_or_timeline(make_proxy, gemini_upstream, log_records):
    gemini_upstream.script(Turn("Sunny."))
    proxy = make_proxy(upstream=gemini_upstream.url)
    body = {"contents": [{"role": "user", "parts": [{"text": "Weather?"}]}]}
    url = f"{proxy.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={QUERY_KEY}"

    reply = httpx.post(url, json=body, headers={"X-Session-Id": "keyed"})
    timeline = httpx.get(f"{proxy.base_url}/loopwarden/sessions/keyed/events", headers={"x-goog-api-key": QUERY_KEY})
    metrics = httpx.get(f"{proxy.metrics_url}/metrics")

    assert reply.status_code == 200
    assert timeline.status_code == 200
    assert timeline.json()["data"]
    logged = [f"{r.getMessage()} {getattr(r, 'fields', {})}" for r in log_records]
    assert logged
    for text in (*logged, timeline.text, metrics.text, reply.text):
        assert QUERY_KEY not in text


def test_an_upstream_error_quoting_the_query_key_is_relayed_masked_in_googles_shape(make_proxy, gemini_upstream):
    message = f"API key not valid: {QUERY_KEY}"
    gemini_upstream.script(Json({"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}, status=400))
    proxy = make_proxy(upstream=gemini_upstream.url)
    body = {"contents": [{"role": "user", "parts": [{"text": "Hi?"}]}]}

    reply = httpx.post(f"{proxy.url}/v1beta/models/{MODEL}:generateContent?key={QUERY_KEY}", json=body)

    assert reply.status_code == 400
    assert QUERY_KEY not in reply.text
    assert reply.json()["error"]["status"] == "INVALID_ARGUMENT"
