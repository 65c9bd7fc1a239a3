"""The console's WSGI app on a real metrics listener, over real HTTP: who gets in, what every
page sends (a strict CSP, nosniff, no framing), read-only, and its pages' failures in its shape."""

from __future__ import annotations

import asyncio
import html
import re
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from proxy.edge.console import Console, ConsoleSources
from proxy.edge.metrics_listener import MetricsListener
from proxy.edge.namespaces import caller_namespace
from proxy.edge.tenants import TenantDirectory, hash_key
from proxy.observe.metrics import Metrics
from proxy.policy.models import Policy
from proxy.session.base import FIELDS, SessionDelta, StoreUnavailable
from proxy.session.identity import session_key
from proxy.session.memory import MemoryStore
from tests.support.tenants import keyed_tenant

ACME_KEY = "lw-acme-key"
ADMIN_KEY = "lw-console-admin"
ACME = {"Authorization": f"Bearer {ACME_KEY}"}


class Running:
    def __init__(self, listener: MetricsListener, store: MemoryStore, loop: asyncio.AbstractEventLoop) -> None:
        self.listener, self.store, self.loop = listener, store, loop

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.listener.port}"

    def add_session(self, namespace: str, session_id: str, delta: SessionDelta | None = None, **values: str) -> None:
        delta = delta or SessionDelta()
        delta.incr(FIELDS.STEPS)
        now_ms = int(time.time() * 1000)
        delta.assign(FIELDS.LAST_SEEN, now_ms // 1000)
        delta.assign(FIELDS.LAST_SEEN_MS, now_ms)
        for name, value in values.items():
            delta.assign(name, value)
        work = self.store.commit(session_key(namespace, session_id), delta, 600)
        asyncio.run_coroutine_threadsafe(work, self.loop).result(5)


@pytest.fixture
def running() -> Iterator[Running]:
    """A listener with the console over a memory store on an event loop of its own thread."""
    yield from serving(
        TenantDirectory({hash_key(ACME_KEY): keyed_tenant("acme"), hash_key("lw-other"): keyed_tenant("other")})
    )


@pytest.fixture
def running_open() -> Iterator[Running]:
    """The same without a tenants file: every caller of the open tenant has its own namespace."""
    yield from serving(TenantDirectory.open("http://127.0.0.1:9/v1"))


def serving(directory: TenantDirectory) -> Iterator[Running]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    store = MemoryStore()
    metrics = Metrics()
    sources = ConsoleSources(directory, store, lambda _t, _p: Policy(name="default"), metrics.scrape_registry)
    listener = MetricsListener(metrics, "127.0.0.1", 0, console=Console(sources, hash_key(ADMIN_KEY)))
    listener.start(loop)
    yield Running(listener, store, loop)
    listener.stop()
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def signed_in_client(running: Running, key: str) -> httpx.Client:
    client = httpx.Client(base_url=running.url, follow_redirects=False)
    form = client.get("/console/signin").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form)
    assert csrf is not None
    answer = client.post("/console/signin", data={"key": key, "csrf": csrf.group(1)})
    assert answer.status_code == 303, answer.text
    return client


def test_a_page_without_credentials_sends_the_browser_to_sign_in(running):
    answer = httpx.get(f"{running.url}/console")

    assert (answer.status_code, answer.headers["location"]) == (303, "/console/signin")


def test_every_page_sends_a_strict_content_security_policy_and_nosniff(running):
    answer = httpx.get(f"{running.url}/console/signin")
    policy = answer.headers["content-security-policy"]
    nonce = re.search(r"'nonce-([^']+)'", policy)

    assert nonce is not None
    assert "default-src 'none'" in policy
    assert "frame-ancestors 'none'" in policy
    assert "script-src" not in policy  # default-src 'none': no script at all
    assert f'<style nonce="{nonce.group(1)}">' in answer.text
    assert answer.headers["x-content-type-options"] == "nosniff"


def test_each_page_gets_a_nonce_of_its_own(running):
    first, second = (httpx.get(f"{running.url}/console/signin") for _ in range(2))

    assert first.headers["content-security-policy"] != second.headers["content-security-policy"]


def test_a_sign_in_without_its_form_token_is_refused(running):
    answer = httpx.post(f"{running.url}/console/signin", data={"key": ACME_KEY})

    assert answer.status_code == 403
    assert "set-cookie" not in answer.headers


def test_a_sign_in_with_a_wrong_key_is_refused(running):
    client = httpx.Client(base_url=running.url)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/signin").text)
    assert csrf is not None

    answer = client.post("/console/signin", data={"key": "lw-wrong", "csrf": csrf.group(1)})

    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers


def test_a_signed_in_browser_reads_its_tenants_sessions_and_no_key_is_on_the_page(running):
    running.add_session("acme", "mine")
    running.add_session("other", "theirs")
    client = signed_in_client(running, ACME_KEY)

    page = client.get("/console")

    assert page.status_code == 200
    assert "mine" in page.text
    assert "theirs" not in page.text
    assert ACME_KEY not in page.text
    assert hash_key(ACME_KEY) not in page.text


def test_the_list_shows_a_sessions_runs(running):
    running.add_session("acme", "third-run", run="3")

    page = httpx.get(f"{running.url}/console", headers=ACME).text

    assert re.search(r'third-run</a></td>\s*<td>acme</td>\s*<td></td>\s*<td></td>\s*<td class="num">3</td>', page)


def test_runs_and_grants_read_as_sentences_in_the_timeline(running):
    delta = SessionDelta()
    delta.event("run_started", 1, run=2, after="loop")
    delta.event("grant", 2, by="admin", steps=10)
    running.add_session("acme", "granted", delta=delta)

    page = httpx.get(f"{running.url}/console/session", params={"id": "granted"}, headers=ACME).text

    assert "run 2 started · after loop" in page
    assert "budget granted by the admin: steps +10" in page


def test_an_api_client_reads_with_its_bearer_key(running):
    running.add_session("acme", "mine")

    answer = httpx.get(f"{running.url}/console", headers=ACME)

    assert (answer.status_code, "mine" in answer.text) == (200, True)


def test_a_wrong_bearer_key_is_refused_with_401(running):
    answer = httpx.get(f"{running.url}/console", headers={"Authorization": "Bearer lw-wrong"})

    assert answer.status_code == 401


def test_the_admin_key_reads_every_tenants_sessions(running):
    running.add_session("acme", "mine")
    running.add_session("other", "theirs")

    page = httpx.get(f"{running.url}/console", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).text

    assert ("mine" in page, "theirs" in page) == (True, True)


def test_without_a_tenants_file_the_admin_key_reads_every_callers_sessions(running_open):
    running_open.add_session(caller_namespace("default", "Bearer sk-alice"), "alices")
    running_open.add_session(caller_namespace("default", "Bearer sk-bob"), "bobs")

    page = httpx.get(f"{running_open.url}/console", headers={"Authorization": f"Bearer {ADMIN_KEY}"}).text

    assert ("alices" in page, "bobs" in page) == (True, True)


def test_without_a_tenants_file_the_admin_opens_a_callers_session_from_the_list(running_open):
    running_open.add_session(caller_namespace("default", "Bearer sk-alice"), "alices")
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    listing = httpx.get(f"{running_open.url}/console", headers=admin).text
    link = re.search(r'href="(/console/session\?[^"]+)"', listing)
    assert link is not None

    answer = httpx.get(f"{running_open.url}{html.unescape(link.group(1))}", headers=admin)

    assert (answer.status_code, "alices" in answer.text) == (200, True)


def test_without_a_tenants_file_a_caller_reads_only_its_own_sessions(running_open):
    running_open.add_session(caller_namespace("default", "Bearer sk-alice"), "alices")
    running_open.add_session(caller_namespace("default", "Bearer sk-bob"), "bobs")

    page = httpx.get(f"{running_open.url}/console", headers={"Authorization": "Bearer sk-alice"}).text

    assert ("alices" in page, "bobs" in page) == (True, False)


def test_a_session_of_another_tenant_is_not_found(running):
    running.add_session("other", "theirs")

    answer = httpx.get(f"{running.url}/console/session", params={"ns": "other", "id": "theirs"}, headers=ACME)

    assert answer.status_code == 404


def test_the_console_is_read_only(running):
    answer = httpx.post(f"{running.url}/console", headers=ACME)

    assert answer.status_code == 405


def test_signing_out_needs_the_forms_token_then_forgets_the_browser(running):
    client = signed_in_client(running, ACME_KEY)
    refused = client.post("/console/signout")
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/console").text)
    assert csrf is not None

    signed_out = client.post("/console/signout", data={"csrf": csrf.group(1)})

    assert (refused.status_code, signed_out.status_code) == (403, 303)
    assert client.get("/console").status_code == 303


def test_a_store_that_does_not_answer_is_a_503_page(running, monkeypatch):
    async def unavailable(*_: object) -> None:
        raise StoreUnavailable("down")

    monkeypatch.setattr(running.store, "sessions", unavailable)

    answer = httpx.get(f"{running.url}/console", headers=ACME)

    assert answer.status_code == 503
    assert "Session state is unavailable" in answer.text
    assert answer.headers["content-type"] == "text/html; charset=utf-8"


def test_the_metrics_are_still_served_beside_the_console(running):
    answer = httpx.get(f"{running.url}/metrics")

    assert answer.status_code == 200
    assert "loopwarden_requests" in answer.text


def test_without_a_tenants_file_the_admin_opens_any_callers_session_by_its_namespace(running_open):
    namespace = caller_namespace("default", "Bearer sk-carol")
    running_open.add_session(namespace, "carols")
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}

    found = httpx.get(f"{running_open.url}/console/session", params={"ns": namespace, "id": "carols"}, headers=admin)
    made_up = httpx.get(f"{running_open.url}/console/session", params={"ns": "x:y", "id": "carols"}, headers=admin)

    assert (found.status_code, made_up.status_code) == (200, 404)


def test_a_sign_in_behind_an_https_proxy_gets_a_secure_cookie(running):
    client = httpx.Client(base_url=running.url, follow_redirects=False)
    csrf = re.search(r'name="csrf" value="([^"]+)"', client.get("/console/signin").text)
    assert csrf is not None

    answer = client.post(
        "/console/signin", data={"key": ACME_KEY, "csrf": csrf.group(1)}, headers={"X-Forwarded-Proto": "https"}
    )

    assert "Secure" in answer.headers["set-cookie"].split("; ")
