"""The console's access: keys resolved as the sessions API resolves them, the admin key by its
digest in constant time, an opaque cookie with expiry, per-form tokens against cross-site posts."""

from __future__ import annotations

import base64

import pytest

from proxy.edge.console import auth as console_auth
from proxy.edge.console.auth import ConsoleAuth, Viewer
from proxy.edge.namespaces import caller_namespace
from proxy.edge.tenants import TenantDirectory, hash_key
from tests.support.tenants import keyed_tenant

ADMIN_KEY = "lw-console-admin"
ACME_KEY = "lw-acme-key"


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def auth(clock: Clock) -> ConsoleAuth:
    directory = TenantDirectory({hash_key(ACME_KEY): keyed_tenant("acme")})
    return ConsoleAuth(directory, hash_key(ADMIN_KEY), ttl=60, clock=clock)


def test_the_admin_key_sees_every_tenant(auth):
    assert auth.viewer_for_key(ADMIN_KEY) == Viewer("admin", None, None)


def test_the_admin_key_is_compared_by_its_digest_in_constant_time(auth, monkeypatch):
    compared: list[tuple[str, str]] = []

    def compare_digest(a: str, b: str) -> bool:
        compared.append((a, b))
        return a == b

    monkeypatch.setattr(console_auth.hmac, "compare_digest", compare_digest)
    auth.viewer_for_key(ADMIN_KEY)

    assert (hash_key(ADMIN_KEY), hash_key(ADMIN_KEY)) in compared


def test_a_tenants_key_sees_its_tenant_only(auth):
    assert auth.viewer_for_key(ACME_KEY) == Viewer("tenant acme", ("acme",), ("acme",))


def test_an_api_client_is_resolved_from_its_bearer_header(auth):
    assert auth.viewer_for_headers(f"Bearer {ACME_KEY}") == Viewer("tenant acme", ("acme",), ("acme",))
    assert auth.viewer_for_headers(f"Bearer {ADMIN_KEY}") == Viewer("admin", None, None)


def test_without_a_tenants_file_a_key_sees_its_own_sessions_and_no_fleet(clock):
    auth = ConsoleAuth(TenantDirectory.open("http://upstream.invalid/v1"), None, clock=clock)

    viewer = auth.viewer_for_key("sk-mine")

    assert viewer == Viewer("your key", (caller_namespace("default", "Bearer sk-mine"),), ())


@pytest.mark.parametrize("key", ["lw-wrong", "", "   ", hash_key(ADMIN_KEY)])
def test_a_wrong_key_is_refused(auth, key):
    assert auth.viewer_for_key(key) is None


def test_without_an_admin_digest_no_key_is_the_admin(clock):
    auth = ConsoleAuth(TenantDirectory({hash_key(ACME_KEY): keyed_tenant("acme")}), None, clock=clock)

    assert auth.viewer_for_key(ADMIN_KEY) is None


def test_a_signed_in_token_stands_for_its_viewer(auth):
    viewer = auth.viewer_for_key(ACME_KEY)

    assert auth.signed_in(auth.sign_in(viewer)) == viewer


def test_the_token_is_opaque_never_the_key_or_its_digest(auth):
    token = auth.sign_in(auth.viewer_for_key(ACME_KEY))

    assert ACME_KEY not in token
    assert hash_key(ACME_KEY) not in token
    assert len(token) >= 40


def test_a_sign_in_expires(auth, clock):
    token = auth.sign_in(auth.viewer_for_key(ACME_KEY))
    clock.now += 60

    assert auth.signed_in(token) is None


def test_an_unknown_token_is_nobody(auth):
    assert auth.signed_in("made-up") is None
    assert auth.signed_in(None) is None


def test_signing_out_forgets_the_token(auth):
    token = auth.sign_in(auth.viewer_for_key(ACME_KEY))
    auth.sign_out(token)

    assert auth.signed_in(token) is None


def test_the_signed_out_tokens_remembered_are_bounded_the_oldest_forgotten_first(auth, monkeypatch):
    monkeypatch.setattr(console_auth, "MAX_SIGNOUTS", 2)
    viewer = auth.viewer_for_key(ACME_KEY)
    first, second, third = (auth.sign_in(viewer) for _ in range(3))

    for token in (first, second, third):
        auth.sign_out(token)

    assert [auth.signed_in(token) for token in (first, second, third)] == [viewer, None, None]


def test_a_sign_in_is_accepted_by_every_process_sharing_the_secret(clock):
    directory = TenantDirectory({hash_key(ACME_KEY): keyed_tenant("acme")})
    here, there = (ConsoleAuth(directory, None, secret=b"s" * 32, clock=clock) for _ in range(2))
    viewer = here.viewer_for_key(ACME_KEY)

    assert there.signed_in(here.sign_in(viewer)) == viewer
    assert there.form_token_ok("signin", here.form_token("signin"))


def test_a_sign_in_of_another_secret_is_refused(clock):
    directory = TenantDirectory({hash_key(ACME_KEY): keyed_tenant("acme")})
    here = ConsoleAuth(directory, None, secret=b"s" * 32, clock=clock)
    there = ConsoleAuth(directory, None, secret=b"t" * 32, clock=clock)

    assert there.signed_in(here.sign_in(here.viewer_for_key(ACME_KEY))) is None


def test_a_sign_in_whose_viewer_was_changed_is_refused(auth):
    version, expires, _, mac = auth.sign_in(auth.viewer_for_key(ACME_KEY)).split(".")
    forged = base64.urlsafe_b64encode(b'["admin",null,null,"00"]').decode().rstrip("=")

    assert auth.signed_in(f"{version}.{expires}.{forged}.{mac}") is None


@pytest.mark.parametrize(
    "token", ["", "v1", "v1.1.2", "v1.9999999999.e30.00", "v1.9999999999.x.y.z", "v2.9999999999.e30.00", "é.é.é.é"]
)
def test_a_malformed_sign_in_token_is_nobody(auth, token):
    assert auth.signed_in(token) is None


def test_a_made_up_form_token_with_other_characters_is_refused_not_an_error(auth):
    assert not auth.form_token_ok("signin", "9999999999.é")


def test_the_cookie_is_secure_where_the_sign_in_came_over_https(auth):
    assert "Secure" in auth.cookie("tok", secure=True).split("; ")
    assert "Secure" not in auth.cookie("tok").split("; ")


def test_the_cookie_is_always_secure_where_the_console_says_so(clock):
    auth = ConsoleAuth(TenantDirectory({}), None, secure_cookie=True, clock=clock)

    assert "Secure" in auth.cookie("tok").split("; ")


def test_the_cookie_is_httponly_same_site_strict_scoped_to_the_console_and_expires(auth):
    flags = auth.cookie("tok").split("; ")

    assert flags[0] == "lw_console=tok"
    assert {"HttpOnly", "SameSite=Strict", "Path=/console", "Max-Age=60"} <= set(flags)


def test_the_cleared_cookie_expires_at_once(auth):
    assert "Max-Age=0" in auth.cleared_cookie().split("; ")


def test_a_form_token_is_accepted_for_its_purpose(auth):
    assert auth.form_token_ok("signin", auth.form_token("signin"))


def test_a_form_token_of_another_purpose_is_refused(auth):
    assert not auth.form_token_ok("signout:abc", auth.form_token("signin"))


def test_an_expired_form_token_is_refused(auth, clock):
    token = auth.form_token("signin")
    clock.now += console_auth.FORM_SECS

    assert not auth.form_token_ok("signin", token)


@pytest.mark.parametrize("token", [None, "", "x", "9999999999.", "9999999999.00ff", "abc.def"])
def test_a_missing_or_forged_form_token_is_refused(auth, token):
    assert not auth.form_token_ok("signin", token)


def test_a_form_token_from_another_process_is_refused(auth, clock):
    other = ConsoleAuth(TenantDirectory({}), None, clock=clock)

    assert not auth.form_token_ok("signin", other.form_token("signin"))
