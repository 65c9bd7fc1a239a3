"""schemathesis against the proxy's own OpenAPI description, over real HTTP.

The proxy (with a tenants file, so keys are checked) runs on a real socket in front of the
fake upstream; schemathesis (its CLI, in a process of its own) reads ``/openapi.json`` and
runs its coverage, fuzzing and stateful phases on every operation, bounded by
``--max-examples``, with every built-in check plus ours (``tests/support/schemathesis_hooks``:
every error in OpenAI's shape).

Left out on purpose: ``negative_data_rejection``. The proxy is a lenient pass-through: it
forwards the fields it does not need untouched and leaves validating them to the upstream,
which here (the fake) accepts anything.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.tenants import PROVIDER_KEY, tenants_yaml
from tests.support.waiting import PATIENCE_SECS

KEY = "lw-schemathesis-" + "7" * 20
AUTH = {"Authorization": f"Bearer {KEY}"}
MAX_EXAMPLES = 40
ROOT = Path(__file__).parents[2]
CONFIG = f"""
[checks]
negative_data_rejection.enabled = false

# A cursor is opaque: one the API did not give is refused (400) by design, and schemathesis
# cannot make the API's own, so "schema-valid data is accepted" does not hold for the two
# paged lists; every other check still runs on them.
[[operations]]
include-path-regex = "^/v1/loopwarden/sessions(/[^/]+/events)?$"
checks.positive_data_acceptance.enabled = false

[auth.openapi.bearer]
bearer = "{KEY}"

[auth.openapi.proxyKey]
api_key = "{KEY}"
"""


@pytest.fixture(scope="module")
def described_proxy(_upstream_server, tmp_path_factory):
    from tests.support.proxy_server import start_proxy

    tenants = tmp_path_factory.mktemp("schemathesis") / "tenants.yaml"
    tenants.write_text(tenants_yaml({"acme": KEY}))
    _upstream_server.reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PROVIDER_KEY", PROVIDER_KEY)
        running = start_proxy(upstream=_upstream_server.url, tenants_file=str(tenants), log_level="error")
    yield running
    running.stop()


@pytest.mark.slow
@pytest.mark.timeout(900)  # bounded by its examples: two minutes on a busy machine; this only catches a hang
def test_schemathesis_finds_no_server_error_and_only_openai_shaped_errors(described_proxy, tmp_path):
    config = tmp_path / "schemathesis.toml"
    config.write_text(CONFIG)
    reports = tmp_path / "reports"
    command = [str(Path(sys.executable).parent / "st"), "--no-color", "--config-file", str(config), "run"]
    command += [f"{described_proxy.url}/openapi.json", "--max-examples", str(MAX_EXAMPLES)]
    command += ["--request-timeout", str(PATIENCE_SECS)]  # bounded by examples; a request this long is a hang
    command += ["--report", "ndjson", "--report-dir", str(reports)]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.support.schemathesis_hooks", "PYTHONPATH": str(ROOT)}

    result = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, text=True)

    events = "".join(path.read_text() for path in reports.glob("*.ndjson"))
    statuses = Counter(re.findall(r'"status_code":(\d+)', events))
    generated = re.search(r"(\d+) generated", result.stdout)
    print(
        f"\nschemathesis: {generated.group(0) if generated else '?'} test cases; responses by status {dict(statuses)}"
    )
    assert result.returncode == 0, result.stdout[-4000:]
    assert not [status for status in statuses if status.startswith("5")]
    assert statuses["200"] > 0  # the generated requests reached the guarded pipeline, not only the key check


def test_the_description_is_served_without_a_key_and_names_every_route(described_proxy):
    document = httpx.get(f"{described_proxy.url}/openapi.json", timeout=5).json()

    assert set(document["paths"]) == {
        "/healthz",
        "/readyz",
        "/v1/chat/completions",
        "/v1/messages",
        "/v1/responses",
        "/v1/loopwarden/sessions",
        "/v1/loopwarden/sessions/{session_id}",
        "/v1/loopwarden/sessions/{session_id}/events",
    }
    assert set(document["paths"]["/v1/loopwarden/sessions/{session_id}"]) == {"get", "delete", "patch"}
    assert set(document["paths"]["/v1/loopwarden/sessions"]) == {"get"}
    listed = {p["name"] for p in document["paths"]["/v1/loopwarden/sessions"]["get"]["parameters"]}
    assert listed == {"limit", "cursor", "state", "reason", "policy", "client", "since", "until"}
    chat = document["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"]["required"] == ["model", "messages"]
    messages = document["paths"]["/v1/messages"]["post"]
    assert messages["responses"]["400"]["content"]["application/json"]["schema"]["required"] == ["type", "error"]


def test_a_405_on_the_chat_route_names_the_allowed_method(described_proxy):
    response = httpx.request("TRACE", f"{described_proxy.url}/v1/chat/completions", headers=AUTH, timeout=5)

    assert response.status_code == 405
    assert response.headers.get("allow") == "POST"


def test_a_405_on_a_litestar_route_names_the_allowed_methods(described_proxy):
    response = httpx.request("TRACE", f"{described_proxy.url}/healthz", timeout=5)

    assert response.status_code == 405
    assert set(response.headers["allow"].replace(" ", "").split(",")) >= {"GET"}
    assert response.json()["error"]["code"] == "method_not_allowed"


def test_options_on_the_sessions_route_lists_its_methods(described_proxy):
    response = httpx.options(f"{described_proxy.url}/v1/loopwarden/sessions/s1", headers=AUTH, timeout=5)

    assert response.status_code == 204
    assert response.headers["allow"] == "DELETE, GET, OPTIONS, PATCH"
