"""relayed_error: upstream errors reach the client with every known key masked, in OpenAI's shape."""

from __future__ import annotations

import base64
import json

import pytest

from proxy.upstream.relayed_errors import MASK, credential_values, masked_text, relayed_error, secret_forms

KEY = "sk-proj-" + "a1b2/c3d4" * 4
JSON = [(b"content-type", b"application/json")]


def error(message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": "x", "param": None, "code": None}}).encode()


@pytest.mark.parametrize(
    ("headers", "values"),
    [
        ([("Authorization", "Bearer sk-1")], ["sk-1"]),
        ([("authorization", "Basic dXNlcjpwYXNz")], ["dXNlcjpwYXNz"]),
        ([("api-key", "azure-key")], ["azure-key"]),
        ([("X-Api-Key", "sk-ant-1")], ["sk-ant-1"]),
        ([("content-type", "application/json")], []),
    ],
)
def test_credential_values_are_the_keys_sent_upstream(headers, values):
    assert credential_values(headers) == values


def unicode_escaped(text: str) -> str:
    """``text`` as JSON may spell it: every character a ``\\u`` escape."""
    return "".join(f"\\u{ord(c):04x}" for c in text)


def test_secret_forms_cover_escaped_encoded_and_base64_forms_lower_cased_longest_first():
    forms = secret_forms([KEY, "short", None, ""])

    raw = KEY.encode()
    expected = {raw, KEY.replace("/", "\\/").encode(), KEY.replace("/", "%2f").encode(), base64.b64encode(raw).lower()}
    assert expected <= set(forms)
    assert base64.urlsafe_b64encode(raw).lower() in forms
    assert all(form == form.lower() for form in forms)
    assert [len(f) for f in forms] == sorted((len(f) for f in forms), reverse=True)


@pytest.mark.parametrize(
    "quoted",
    [
        KEY,
        KEY.replace("/", "\\/"),
        KEY.replace("/", "%2F"),
        KEY.replace("/", "%2f"),
        KEY.upper(),
        unicode_escaped(KEY),
        "sk-proj-" + unicode_escaped(KEY[8:10]) + KEY[10:],
        base64.b64encode(KEY.encode()).decode(),
        base64.urlsafe_b64encode(KEY.encode()).decode(),
        base64.b64encode(KEY.encode()).decode().replace("/", "\\/"),
    ],
    ids=[
        "raw",
        "json-escaped",
        "percent-encoded",
        "percent-encoded-lower",
        "upper-cased",
        "unicode-escaped",
        "partly-unicode-escaped",
        "base64",
        "base64-url-safe",
        "base64-json-escaped",
    ],
)
@pytest.mark.parametrize("tenants", [1, 100], ids=["one-key", "a-key-per-tenant"])  # a search per form, or one pass
def test_a_key_in_an_openai_shaped_error_is_masked_and_the_rest_kept(quoted, tenants):
    body = '{"error": {"message": "bad key ' + quoted + '!", "type": "x", "param": null, "code": "k"}}'  # as sent
    others = [f"sk-other-{n:04d}-" + "z9" * 16 for n in range(tenants - 1)]

    out, headers = relayed_error(401, body.encode(), JSON, secret_forms([*others, KEY]))

    assert json.loads(out)["error"] == {"message": f"bad key {MASK.decode()}!", "type": "x", "param": None, "code": "k"}
    assert headers == JSON


def test_a_key_spelled_with_escapes_in_an_object_key_is_masked():
    body = '{"error": {"message": "bad key", "' + unicode_escaped(KEY) + '": 1}}'

    out, _ = relayed_error(401, body.encode(), JSON, secret_forms([KEY]))

    assert json.loads(out)["error"] == {"message": "bad key", MASK.decode(): 1}


@pytest.mark.parametrize("before", ["", "u:", "us:"], ids=["aligned", "shifted-1", "shifted-2"])
def test_a_key_base64_encoded_inside_a_longer_value_is_masked(before):
    credentials = base64.b64encode((before + KEY + "!?").encode())
    body = b'{"error": {"message": "bad credentials Basic ' + credentials + b'"}}'

    out, _ = relayed_error(401, body, JSON, secret_forms([KEY]))

    shown = json.loads(out)["error"]["message"]
    assert MASK.decode() in shown
    assert len(shown.replace(MASK.decode(), "")) <= len("bad credentials Basic ") + 12  # a group before, two after


def test_an_error_with_escapes_and_no_key_is_relayed_byte_for_byte():
    body = b'{"error": {"message": "caf\\u00e9 \\"quoted\\"", "type": "x", "param": null, "code": null}}'

    assert relayed_error(400, body, JSON, secret_forms([KEY])) == (body, JSON)


def test_a_key_across_the_wrapped_snippets_end_leaks_no_prefix():
    body = b"x" * 190 + KEY.encode() + b" rejected"

    out, _ = relayed_error(401, body, [(b"content-type", b"text/plain")], secret_forms([KEY]))

    assert KEY[:8].encode() not in out
    assert json.loads(out)["error"]["code"] == "upstream_401"


def test_a_decoded_body_loses_its_content_coding():
    headers = [*JSON, (b"content-encoding", b"gzip")]

    out, kept = relayed_error(401, error(f"key {KEY}"), headers, secret_forms([KEY]))

    assert kept == JSON
    assert KEY.encode() not in out


@pytest.mark.parametrize("coding", [b"snappy", b"gzip, snappy", b"compress"])
def test_a_body_in_a_coding_httpx_did_not_undo_is_not_relayed(coding):
    out, kept = relayed_error(401, b"\x00raw " + KEY.encode(), [*JSON, (b"content-encoding", coding)], [])

    assert json.loads(out)["error"]["code"] == "upstream_401"
    assert b"raw" not in out
    assert kept == JSON


def test_an_error_without_keys_is_unchanged():
    body = error("model not found")

    assert relayed_error(404, body, JSON, secret_forms([KEY])) == (body, JSON)


def test_masked_text_masks_every_form_and_keeps_other_text():
    text = f"a {KEY} b {KEY.replace('/', '%2F')} c {KEY.upper()} d é"

    assert masked_text(text, secret_forms([KEY])) == "a [REDACTED] b [REDACTED] c [REDACTED] d é"


def test_a_key_quoted_in_an_error_header_is_masked():
    headers = [*JSON, (b"www-authenticate", f'Bearer error="invalid_token", token="{KEY}"'.encode())]

    _, kept = relayed_error(401, error("bad key"), headers, secret_forms([KEY]))

    assert kept[-1] == (b"www-authenticate", b'Bearer error="invalid_token", token="[REDACTED]"')
