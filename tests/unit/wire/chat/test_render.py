"""Writing chat completions: request bodies rewritten in place, endings as refusals."""

from __future__ import annotations

import json

from proxy.wire.chat.render import as_refusal, completion, completion_as_sse, with_usage_requested


def test_usage_is_requested_without_touching_the_rest_of_the_body():
    body = b'{"model":"m","messages":[{"role":"user","content":"caf\\u00e9 }"}],"stream":true}  \n'

    spliced = json.loads(with_usage_requested(body))

    assert spliced == {**json.loads(body), "stream_options": {"include_usage": True}}


def test_an_ending_as_refusal_moves_the_text_and_keeps_everything_else():
    body = completion("Found X. Missing Y. Next: Z.", model="m")

    refused = as_refusal(body)

    assert refused["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "refusal": "Found X. Missing Y. Next: Z.",
    }
    assert {k: v for k, v in refused.items() if k != "choices"} == {k: v for k, v in body.items() if k != "choices"}
    assert body["choices"][0]["message"]["content"] == "Found X. Missing Y. Next: Z."  # the original is untouched


def test_a_refusal_streams_as_refusal_deltas_with_no_content():
    sse = completion_as_sse(as_refusal(completion("No object: Y is missing.", model="m")))

    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in sse.split(b"\n\n") if line.startswith(b"data: {")]

    assert deltas[0] == {"role": "assistant", "content": None, "refusal": None}
    assert "".join(d.get("refusal") or "" for d in deltas) == "No object: Y is missing."
    assert not any(d.get("content") for d in deltas)
    assert sse.endswith(b"data: [DONE]\n\n")


def test_as_refusal_turns_every_choice_and_leaves_odd_shapes_alone():
    two = {"choices": [{"message": {"content": "a"}}, {"message": {"content": "b"}}]}

    assert [c["message"]["refusal"] for c in as_refusal(two)["choices"]] == ["a", "b"]
    assert as_refusal({"choices": "x"}) == {"choices": "x"}
    assert as_refusal({"choices": [{"message": {"content": None}}]}) == {"choices": [{"message": {"content": None}}]}
