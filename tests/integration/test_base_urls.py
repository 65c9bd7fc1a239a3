"""A client whose base URL repeats /v1 (``…/v1/v1/chat/completions``; an Anthropic client given
the OpenAI-style ``…/v1``) is told which base URL to set, in its own API's error shape, and
nothing reaches the model unguarded."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest


def test_the_openai_sdk_with_v1_twice_gets_a_400_naming_the_base_url_to_set(proxy, upstream):
    client = openai.OpenAI(base_url=f"{proxy.url}/v1/v1", api_key="sk-p", max_retries=0)

    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    assert refused.value.code == "base_url_repeats_v1"
    assert "base_url='http://HOST:PORT/v1'" in refused.value.message
    assert upstream.requests == []


def test_an_anthropic_client_given_the_openai_style_base_url_is_told_to_drop_v1(proxy, upstream):
    client = anthropic.Anthropic(base_url=f"{proxy.url}/v1", api_key="sk-ant-p", max_retries=0)

    with pytest.raises(anthropic.BadRequestError) as refused:
        client.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])

    assert refused.value.body["type"] == "error"
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert "ANTHROPIC_BASE_URL=http://HOST:PORT)" in refused.value.body["error"]["message"]
    assert upstream.requests == []


@pytest.mark.parametrize("path", ["/v1/v1/models", "/v1/v1/embeddings", "/v1/v1/responses"])
def test_no_path_that_repeats_v1_is_passed_through(proxy, upstream, path):
    response = httpx.post(
        f"{proxy.url}{path}", json={"model": "m", "input": "x"}, headers={"Authorization": "Bearer sk-p"}
    )

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "base_url_repeats_v1"
    assert upstream.requests == []
