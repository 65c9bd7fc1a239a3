"""The chat-completions wire helpers that rewrite request bodies."""

from __future__ import annotations

import json

from proxy.wire.chat_completions import with_usage_requested


def test_usage_is_requested_without_touching_the_rest_of_the_body():
    body = b'{"model":"m","messages":[{"role":"user","content":"caf\\u00e9 }"}],"stream":true}  \n'

    spliced = json.loads(with_usage_requested(body))

    assert spliced == {**json.loads(body), "stream_options": {"include_usage": True}}
