"""The operator console in a real browser (Debian's headless Chromium, driven by Playwright)
against a real proxy over real HTTP: the list, one session's card and timeline, the filters,
signing in, and hostile sessions rendered inert."""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import sync_playwright

from proxy.edge.namespaces import caller_namespace
from proxy.edge.tenants import hash_key
from proxy.session.base import FIELDS, SessionDelta
from proxy.session.identity import session_key
from tests.support.fake_upstream import Json, chat_completion, tool_call

CHROMIUM = "/usr/bin/chromium"
"""Debian's package (.ci/run installs it when missing): never a browser Playwright downloads."""
pytestmark = pytest.mark.slow

ACME_KEY = "lw-acme-console-1"
BYOK_KEY = "lw-byok-console-1"
ADMIN_KEY = "lw-console-admin-1"
ACME = {"Authorization": f"Bearer {ACME_KEY}"}
BYOK = {"Authorization": "Bearer sk-byok-provider", "X-LoopWarden-Key": BYOK_KEY}
HOSTILE_TOOL = "<img src=x onerror=alert(1)>"
HOSTILE_ID = "s\"'<b>x</b>"
HOSTILE_SUMMARY = "<script>alert(2)</script> done"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def proxy(make_proxy, upstream, tmp_path, monkeypatch, write_policies):
    """Two tenants (acme, byok) with a one-step policy for endings; content logging on, so a
    reply's text reaches the timeline (where a hostile one must stay inert)."""
    monkeypatch.setenv("ACME_PROVIDER_KEY", "sk-acme-provider")
    suffix = uuid.uuid4().hex[:8]
    path = tmp_path / "tenants.yaml"
    path.write_text(
        f"""
tenants:
  - name: acme{suffix}
    key_sha256: ["{hash_key(ACME_KEY)}"]
    upstream: {{base_url: "{upstream.url}", api_key_env: ACME_PROVIDER_KEY}}
    policies: [default, capped]
  - name: byok{suffix}
    key_sha256: ["{hash_key(BYOK_KEY)}"]
    upstream: {{forward_client_key: true}}
"""
    )
    policies = write_policies(default="max_steps: 50\n", capped="max_steps: 2\n")
    return make_proxy(
        tenants_file=str(path),
        policies_dir=str(policies),
        console_admin_key_sha256=hash_key(ADMIN_KEY),
        log_contents=True,
    )


def call(proxy, headers: dict[str, str], session: str, **extra: str) -> None:
    response = httpx.post(
        f"{proxy.base_url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "find the weather"}]},
        headers={**headers, "X-Session-Id": session, **extra},
        timeout=10,
    )
    assert response.status_code == 200, response.text


def end_session(proxy, upstream, session: str, *, tool: str = "get_weather", headers=ACME, **extra: str) -> None:
    """Two calls under a two-step policy: the second ends the session (``budget_steps``)."""
    upstream.script(
        Json(chat_completion(None, tool_calls=[tool_call(tool, '{"city": "<svg onload=alert(3)>"}')])),
        Json(chat_completion("Here is what I found.")),
    )
    capped = {"X-LoopWarden-Policy": "capped", **extra}
    call(proxy, headers, session, **capped)
    call(proxy, headers, session, **capped)


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    dialogs: list[str] = []
    opened.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    opened.dialogs = dialogs
    yield opened
    context.close()


def sign_in(page, proxy, key: str) -> None:
    page.goto(f"{proxy.metrics_url}/console")
    page.fill("#key", key)
    page.click("button[type=submit]")


def test_signing_in_with_a_tenants_key_opens_the_sessions_list(page, proxy):
    sign_in(page, proxy, ACME_KEY)

    assert page.url.endswith("/console")
    assert page.locator("h1").inner_text() == "Sessions"


def test_the_sign_in_cookie_is_opaque_httponly_and_same_site_strict(page, proxy):
    sign_in(page, proxy, ACME_KEY)

    [cookie] = page.context.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    assert ACME_KEY not in cookie["value"]
    assert hash_key(ACME_KEY) not in cookie["value"]


def test_a_wrong_key_is_refused(page, proxy):
    sign_in(page, proxy, "lw-not-a-key")

    assert page.locator("[role=alert]").inner_text() == "This key is not accepted."
    assert page.context.cookies() == []


def test_the_list_shows_an_ended_session_with_its_reason(page, proxy, upstream):
    end_session(proxy, upstream, "ended-1")
    sign_in(page, proxy, ACME_KEY)

    row = page.locator("tr.session", has_text="ended-1")
    assert row.locator(".pill").inner_text() == "ended"
    assert row.locator(".reason").inner_text() == "budget_steps"


def test_the_session_page_shows_the_card_then_the_timeline_in_order(page, proxy, upstream):
    end_session(proxy, upstream, "ended-2")
    sign_in(page, proxy, ACME_KEY)
    page.click("text=ended-2")

    card = page.locator("#ending")
    assert card.locator(".reason").inner_text() == "budget_steps"
    assert "DELETE /v1/loopwarden/sessions/ended-2" in card.locator(".continue").inner_text()
    order = page.locator("#ending, #timeline").evaluate_all("els => els.map(e => e.id)")
    assert order == ["ending", "timeline"]
    numbers = [int(text.lstrip("#")) for text in page.locator("#timeline .seq").all_inner_texts()]
    kinds = page.locator("#timeline .kind").all_inner_texts()
    assert numbers == list(range(len(kinds)))
    assert kinds == ["step", "intervention", "ending"]
    assert page.locator("#timeline .k-step .tool").all_inner_texts() == ["get_weather"]


def test_the_session_page_shows_budgets_used_against_their_limits(page, proxy, upstream):
    end_session(proxy, upstream, "ended-3")
    sign_in(page, proxy, ACME_KEY)
    page.click("text=ended-3")

    steps = page.locator("#budgets tr", has_text="steps").first.inner_text()
    assert re.search(r"steps\s+2 steps\s+2 steps\s+100 %", steps), steps


def test_the_filters_narrow_the_list(page, proxy, upstream):
    upstream.script(Json(chat_completion()))
    call(proxy, ACME, "still-running", **{"User-Agent": "claude-cli/2.0"})
    end_session(proxy, upstream, "ended-4")
    sign_in(page, proxy, ACME_KEY)

    page.select_option("select[name=state]", "ended")
    page.click("button.go")
    ended = page.locator("tr.session td.mono").all_inner_texts()
    page.goto(f"{proxy.metrics_url}/console?client=claude-cli")
    by_client = page.locator("tr.session td.mono").all_inner_texts()

    assert (ended, by_client) == (["ended-4"], ["still-running"])


def test_a_tenant_sees_only_its_own_sessions_and_the_admin_key_sees_all(browser, proxy, upstream):
    upstream.script(*[Json(chat_completion())] * 2)
    call(proxy, ACME, "acme-only")
    call(proxy, BYOK, "byok-only")
    seen = {}
    for key in (ACME_KEY, ADMIN_KEY):
        context = browser.new_context()
        opened = context.new_page()
        sign_in(opened, proxy, key)
        seen[key] = sorted(opened.locator("tr.session td.mono").all_inner_texts())
        context.close()

    assert seen == {ACME_KEY: ["acme-only"], ADMIN_KEY: ["acme-only", "byok-only"]}


def store_session(proxy, session_id: str, delta: SessionDelta) -> None:
    """Commit a session straight into the running proxy's store, on its event loop: a session
    id the proxy's own identity rules would never let through (they hash unsafe ids) can still
    reach a store written by another version or another tool."""
    sources = proxy.server.metrics.console.sources
    namespace = sources.directory.tenants[0].name
    loop = proxy.server.servers[0].get_loop()
    commit = sources.store.commit(session_key(namespace, session_id), delta, 3600)
    asyncio.run_coroutine_threadsafe(commit, loop).result(10)


def hostile_delta() -> SessionDelta:
    now_ms = int(time.time() * 1000)
    delta = SessionDelta()
    delta.incr(FIELDS.STEPS)
    delta.assign(FIELDS.LAST_SEEN, now_ms // 1000)
    delta.assign(FIELDS.LAST_SEEN_MS, now_ms)
    delta.assign(FIELDS.POLICY, "<i>policy</i>")
    delta.assign(FIELDS.CLIENT, "<u>client</u>")
    delta.assign(FIELDS.TERMINATION, "loop<img src=x onerror=alert(5)>")
    delta.event("step", now_ms, step=1, model="<b>m</b>", tools=HOSTILE_TOOL, reply=HOSTILE_SUMMARY)
    delta.event("intervention", now_ms, guard="loop", reason="<svg onload=alert(6)>", shadow=False)
    delta.event("ending", now_ms, reason="loop", guard="loop", evidence=HOSTILE_TOOL, notice=HOSTILE_SUMMARY)
    return delta


def test_a_hostile_session_renders_inert(page, proxy):
    store_session(proxy, HOSTILE_ID, hostile_delta())
    sign_in(page, proxy, ACME_KEY)

    assert page.locator("tr.session td.mono").first.inner_text() == HOSTILE_ID
    page.locator("tr.session td.mono a").first.click()

    assert page.locator("#session-id").inner_text() == HOSTILE_ID
    assert page.locator("#timeline .tool").all_inner_texts() == [HOSTILE_TOOL]
    assert page.locator("#ending .notice").inner_text() == HOSTILE_SUMMARY
    assert page.locator("#ending .evidence").inner_text() == HOSTILE_TOOL
    assert page.locator("main img, main script, main svg, main b, main i, main u").count() == 0
    assert page.dialogs == []


def test_the_fleet_page_shows_endings_per_tenant_and_policy(page, proxy, upstream):
    end_session(proxy, upstream, "ended-5")
    sign_in(page, proxy, ACME_KEY)
    page.click("text=Fleet")

    row = page.locator("#endings tr", has_text="budget_steps").inner_text()
    assert re.search(r"acme\w+\s+capped\s+budget_steps\s+1", row), row


def test_screenshots_of_the_list_and_an_ended_session(page, proxy, upstream):
    """Also writes docs/console-*.png when LOOPWARDEN_CONSOLE_SCREENSHOTS is set (for the README)."""
    upstream.script(*[Json(chat_completion(usage=(1200, 300)))] * 3)
    call(proxy, ACME, "research-agent-7", **{"User-Agent": "claude-cli/2.0"})
    call(proxy, ACME, "research-agent-7", **{"User-Agent": "claude-cli/2.0"})
    call(proxy, ACME, "support-bot-311", **{"User-Agent": "OpenAI/Python 1.54"})
    end_session(proxy, upstream, "codex-fix-tests-42", **{"User-Agent": "codex_exec/0.46.0 (Linux)"})
    sign_in(page, proxy, ACME_KEY)
    shots = {"console-sessions.png": page.screenshot(full_page=True)}
    page.click("text=codex-fix-tests-42")
    shots["console-session.png"] = page.screenshot(full_page=True)

    assert all(shot.startswith(b"\x89PNG") for shot in shots.values())
    if os.environ.get("LOOPWARDEN_CONSOLE_SCREENSHOTS"):
        DOCS.mkdir(exist_ok=True)
        for name, shot in shots.items():
            (DOCS / name).write_bytes(shot)


@pytest.mark.parametrize("backend", ["redis", "cluster"])
def test_the_console_reads_sessions_kept_in_redis_for_a_caller_without_a_tenants_file(
    make_proxy, upstream, request, backend
):
    """The store's reads run on the proxy's event loop, where its Redis connections live; a
    caller of the open tenant reads its own sessions, and its namespace (derived from its key)
    appears on no page."""
    url = request.getfixturevalue("redis_cluster").url if backend == "cluster" else request.getfixturevalue("redis_url")
    proxy = make_proxy(redis_url=url, redis_cluster=backend == "cluster")
    mine = {"Authorization": f"Bearer sk-mine-{uuid.uuid4().hex[:8]}"}
    upstream.script(Json(chat_completion(None, tool_calls=[tool_call("get_weather", "{}")])))
    call(proxy, mine, "in-redis")

    listing = httpx.get(f"{proxy.metrics_url}/console", headers=mine, timeout=10)
    session = httpx.get(f"{proxy.metrics_url}/console/session", params={"id": "in-redis"}, headers=mine, timeout=10)
    other = httpx.get(f"{proxy.metrics_url}/console", headers={"Authorization": "Bearer sk-someone-else"}, timeout=10)

    namespace = caller_namespace("default", mine["Authorization"])
    assert (listing.status_code, session.status_code) == (200, 200)
    assert 'href="/console/session?id=in-redis"' in listing.text
    assert '<code class="tool">get_weather</code>' in session.text
    assert "in-redis" not in other.text
    assert all(namespace.partition("~")[2] not in page.text for page in (listing, session))


def test_the_console_is_never_on_the_api_port(proxy):
    on_api = httpx.get(f"{proxy.url}/console", headers=ACME, timeout=10)
    on_listener = httpx.get(f"{proxy.metrics_url}/console", headers=ACME, timeout=10)

    assert (on_api.status_code, on_listener.status_code) == (404, 200)
