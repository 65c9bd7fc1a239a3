"""Loading the tenants file and authenticating against it."""

from __future__ import annotations

import tracemalloc

import pytest

from proxy.edge.namespaces import caller_namespace
from proxy.edge.tenants import (
    Tenant,
    TenantDirectory,
    TenantsFileError,
    check_upstream_url,
    hash_key,
    load_tenants,
)
from proxy.errors import AuthenticationFailed, PermissionDenied

KEY = "lw-key-1"
GOOD = f"""
tenants:
  - name: acme
    key_sha256: ["{hash_key(KEY)}"]
    upstream: {{base_url: "https://api.example.com/v1/", api_key_env: ACME_KEY}}
    policies: [default, strict]
    default_policy: strict
"""
ENV = {"ACME_KEY": "sk-acme"}


def _load(tmp_path, text, env=ENV, default_upstream=None):
    path = tmp_path / "tenants.yaml"
    path.write_text(text)
    return load_tenants(path, default_upstream, env)


def test_loads_tenant_with_key_from_environment(tmp_path):
    directory = _load(tmp_path, GOOD)

    credentials = directory.authenticate(f"Bearer {KEY}", None)

    assert credentials.tenant.name == "acme"
    assert credentials.tenant.upstream_url == "https://api.example.com/v1"
    assert credentials.upstream_authorization == "Bearer sk-acme"
    assert credentials.tenant.default_policy == "strict"


def test_upper_case_digest_is_accepted(tmp_path):
    directory = _load(tmp_path, GOOD.replace(hash_key(KEY), hash_key(KEY).upper()))

    assert directory.authenticate(f"Bearer {KEY}", None).tenant.name == "acme"


@pytest.mark.parametrize(
    ("text", "env", "fragment"),
    [
        ("tenants: []", ENV, "tenants"),
        ("tenants: [{name: a}]", ENV, "key_sha256"),
        (GOOD.replace(hash_key(KEY), "abc"), ENV, "key_sha256"),
        (GOOD, {}, "ACME_KEY is not set"),
        (GOOD.replace("api_key_env: ACME_KEY", "api_key_env: ACME_KEY, forward_client_key: true"), ENV, "exactly one"),
        (GOOD.replace("default_policy: strict", "default_policy: lenient"), ENV, "default_policy"),
        (GOOD.replace("https://api.example.com/v1/", "file:///etc/passwd"), ENV, "base_url"),
        (GOOD.replace("https://api.example.com/v1/", "http://169.254.169.254/latest"), ENV, "metadata endpoint"),
        (GOOD.replace("https://api.example.com/v1/", "http://metadata.google.internal/"), ENV, "metadata"),
        (GOOD + "    colour: blue\n", ENV, "colour"),
        (GOOD + GOOD.replace("tenants:\n", ""), ENV, "duplicate tenant name"),
        ("tenants: [", ENV, "cannot read"),
        (
            GOOD + "    passthrough: [models, chats]\n",
            ENV,
            "passthrough: Value error, unknown pass-through families ['chats']",
        ),
    ],
    ids=[
        "no-tenants",
        "no-keys",
        "bad-digest",
        "missing-env",
        "two-credential-sources",
        "default-not-allowed",
        "file-scheme",
        "link-local",
        "metadata-host",
        "unknown-field",
        "duplicate-name",
        "bad-yaml",
        "unknown-pass-through-family",
    ],
)
def test_bad_tenants_file_names_file_and_field(tmp_path, text, env, fragment):
    with pytest.raises(TenantsFileError) as caught:
        _load(tmp_path, text, env)

    assert str(tmp_path / "tenants.yaml") in str(caught.value)
    assert fragment in str(caught.value)


def test_every_problem_of_every_tenant_is_reported_at_once_each_naming_tenant_and_field(tmp_path):
    text = f"""
tenants:
  - name: acme
    key_sha256: ["abc"]
    upstream: {{base_url: "file:///etc/passwd", api_key_env: ACME_KEY}}
    colour: blue
  - name: beta
    key_sha256: ["{hash_key("lw-beta")}"]
    upstream: {{base_url: "http://169.254.169.254/", api_key_env: BETA_KEY}}
  - name: gamma
    key_sha256: ["{hash_key("lw-beta")}"]
    upstream: {{api_key_env: ACME_KEY}}
    daily_tokens: 0
colour: red
"""

    with pytest.raises(TenantsFileError) as caught:
        _load(tmp_path, text, env={})

    message = str(caught.value)
    assert message.startswith(f"{tmp_path / 'tenants.yaml'}: 9 problems:\n")
    for fragment in [
        "tenants[0] (acme).upstream.api_key_env: Value error, environment variable ACME_KEY is not set",
        "tenants[2] (gamma).upstream.api_key_env: Value error, environment variable ACME_KEY is not set",
        "tenants[0] (acme).key_sha256: Value error, each key_sha256 entry must be 64 hex characters",
        "tenants[0] (acme).upstream.base_url: Value error, upstream base_url must be an http(s) URL",
        "tenants[0] (acme).colour: Extra inputs are not permitted",
        "tenants[2] (gamma).daily_tokens: Input should be greater than or equal to 1",
        "colour: Extra inputs are not permitted",
        "tenants[1] (beta).upstream.base_url: ",
        "tenants[1] (beta).upstream.api_key_env: Value error, environment variable BETA_KEY is not set",
    ]:
        assert f"  - {fragment}" in message
    assert "metadata" in message.split("tenants[1] (beta).upstream.base_url: ", 1)[1].split("\n", 1)[0]


def test_problems_between_tenants_are_reported_with_the_rest(tmp_path):
    other = GOOD.replace("tenants:\n", "").replace("name: acme", "name: other")
    unset = GOOD.replace("tenants:\n", "").replace("name: acme", "name: third").replace("ACME_KEY", "THIRD_KEY")

    with pytest.raises(TenantsFileError) as caught:
        _load(tmp_path, GOOD + other + GOOD.replace("tenants:\n", "") + unset)

    assert str(caught.value).splitlines()[1:] == [
        "  - tenants[3] (third).upstream.api_key_env: Value error, environment variable THIRD_KEY is not set",
        "  - tenants[1] (other).key_sha256: key already belongs to acme",
        "  - tenants[2] (acme).name: duplicate tenant name",
    ]


def test_a_default_upstream_that_is_no_model_api_names_the_flag(tmp_path):
    text = GOOD.replace('base_url: "https://api.example.com/v1/", ', "")

    with pytest.raises(TenantsFileError, match=r"tenants\[0\] \(acme\)\.upstream\.base_url \(--upstream\): "):
        _load(tmp_path, text, default_upstream="http://169.254.169.254/v1")


def test_same_key_for_two_tenants_is_rejected(tmp_path):
    text = GOOD + GOOD.replace("tenants:\n", "").replace("name: acme", "name: other")

    with pytest.raises(TenantsFileError, match="already belongs to acme"):
        _load(tmp_path, text)


def test_missing_base_url_falls_back_to_default_upstream(tmp_path):
    text = GOOD.replace('base_url: "https://api.example.com/v1/", ', "")

    directory = _load(tmp_path, text, default_upstream="http://127.0.0.1:9/v1")

    assert directory.authenticate(f"Bearer {KEY}", None).tenant.upstream_url == "http://127.0.0.1:9/v1"


@pytest.mark.parametrize("authorization", [None, "", "Bearer", "Bearer wrong", f"Basic {KEY}", KEY])
def test_bad_credentials_raise_the_same_401(tmp_path, authorization):
    directory = _load(tmp_path, GOOD)

    with pytest.raises(AuthenticationFailed) as caught:
        directory.authenticate(authorization, None)

    assert caught.value.message == "Invalid or missing API key for this proxy."


def test_open_directory_forwards_whatever_the_client_sent():
    directory = TenantDirectory.open("http://127.0.0.1:9/v1")

    credentials = directory.authenticate("Bearer sk-anything", None)

    assert (credentials.tenant.name, credentials.upstream_authorization) == ("default", "Bearer sk-anything")


@pytest.mark.parametrize(("requested", "expected"), [(None, "strict"), ("strict", "strict"), ("default", "default")])
def test_choose_policy_allows_listed_policies(tmp_path, requested, expected):
    tenant = _load(tmp_path, GOOD).authenticate(f"Bearer {KEY}", None).tenant

    assert tenant.choose_policy(requested) == expected


def test_choose_policy_refuses_unlisted_policy_with_403(tmp_path):
    tenant = _load(tmp_path, GOOD).authenticate(f"Bearer {KEY}", None).tenant

    with pytest.raises(PermissionDenied):
        tenant.choose_policy("lenient")


@pytest.mark.parametrize(
    "url",
    ["https://api.openai.com/v1", "http://127.0.0.1:8000/v1", "http://10.0.0.5/v1", "http://[::1]:80/v1"],
)
def test_ordinary_upstream_urls_are_accepted(url):
    assert check_upstream_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "ftp://x/v1",
        "http:///v1",
        "http://169.254.169.254/",
        "http://[fe80::1]/",
        "http://0.0.0.0/",
        "gopher://a",
        "https://api.openai.com/v1/v1",
        "https://api.openai.com/V1/v1/",
    ],
)
def test_dangerous_upstream_urls_are_rejected(url):
    with pytest.raises(ValueError, match="upstream"):
        check_upstream_url(url)


OPEN = TenantDirectory.open("https://api.example.com/v1")


@pytest.mark.parametrize("requested", ["strict", "lenient", "candidate"])
def test_the_implicit_tenant_may_choose_any_policy(requested):
    tenant = OPEN.authenticate("Bearer sk-a", None).tenant

    assert tenant.choose_policy(requested) == requested


def test_without_tenants_file_callers_with_different_keys_get_different_namespaces():
    first = OPEN.authenticate("Bearer sk-first", None).namespace
    second = OPEN.authenticate("Bearer sk-second", None).namespace

    assert first != second
    assert OPEN.authenticate("Bearer sk-first", None).namespace == first


def test_the_session_namespace_does_not_contain_the_key():
    namespace = OPEN.authenticate("Bearer sk-secret-provider-key", None).namespace

    assert "sk-secret" not in namespace
    assert namespace.startswith("default~")
    assert ":" not in namespace


def test_with_a_tenants_file_the_namespace_is_the_tenant(tmp_path):
    assert _load(tmp_path, GOOD).authenticate(f"Bearer {KEY}", None).namespace == "acme"


@pytest.mark.parametrize("authorization", [None, "", "   "])
def test_without_tenants_file_the_sessions_api_needs_authorization(authorization):
    with pytest.raises(AuthenticationFailed):
        OPEN.authenticate(authorization, None, identified=True)


def test_the_namespace_does_not_depend_on_how_the_bearer_scheme_is_spelled():
    assert OPEN.authenticate("bearer sk-a", None).namespace == OPEN.authenticate("Bearer  sk-a ", None).namespace


def test_callers_with_distinct_huge_keys_are_told_apart_without_keeping_their_keys():
    directory = TenantDirectory.open("http://up/v1")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        namespaces = {directory.authenticate(f"Bearer {n}" + "k" * 60_000, None).namespace for n in range(200)}
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()

    assert len(namespaces) == 200
    assert held < 2_000_000  # 200 cached 60 kB keys would hold 12 MB
    assert directory.authenticate("Bearer sk-1", None).namespace == caller_namespace("default", "Bearer sk-1")


@pytest.mark.parametrize(
    ("listed", "family", "allowed"),
    [
        ("", "files", True),
        ("    passthrough: [models, embeddings]\n", "embeddings", True),
        ("    passthrough: [models, embeddings]\n", "files", False),
        ("    passthrough: [models, other]\n", "other", True),
        ("    passthrough: []\n", "models", False),
    ],
    ids=["no-list-allows-all", "listed", "unlisted", "other-families", "empty-list-allows-none"],
)
def test_a_tenants_pass_through_allow_list_names_the_families_it_may_use(tmp_path, listed, family, allowed):
    tenant = _load(tmp_path, GOOD + listed).authenticate(f"Bearer {KEY}", None).tenant

    if allowed:
        tenant.check_family(family)
    else:
        with pytest.raises(PermissionDenied, match=repr(family)):
            tenant.check_family(family)


def test_x_api_key_is_accepted_as_a_tenants_proxy_key():
    tenant = Tenant("team", "http://up", "Bearer sk", False, ("default",), "default")
    directory = TenantDirectory({hash_key("lw-team"): tenant})

    credentials = directory.authenticate(None, None, api_key="lw-team")

    assert credentials.tenant.name == "team"


ADMIN = "lw-admin-1"
WITH_ADMIN_AT_END = GOOD + f'    admin_key_sha256: "{hash_key(ADMIN)}"\n'


def test_a_tenants_admin_key_names_its_tenant(tmp_path):
    directory = _load(tmp_path, WITH_ADMIN_AT_END)

    admin_of = directory.admin(ADMIN)

    assert getattr(admin_of, "name", None) == "acme"


@pytest.mark.parametrize("presented", [KEY, "lw-admin-2", "", None], ids=["tenant-key", "unknown", "empty", "none"])
def test_no_other_key_is_an_admin_key(tmp_path, presented):
    assert _load(tmp_path, WITH_ADMIN_AT_END).admin(presented) is None


def test_without_an_admin_key_no_key_is_an_admin_key(tmp_path):
    assert _load(tmp_path, GOOD).admin(KEY) is None


def test_an_admin_key_that_is_also_a_tenants_key_is_rejected(tmp_path):
    text = GOOD + f'    admin_key_sha256: "{hash_key(KEY)}"\n'

    with pytest.raises(TenantsFileError, match=r"tenants\[0\] \(acme\)\.admin_key_sha256"):
        _load(tmp_path, text)


def test_an_admin_key_that_is_not_a_digest_is_rejected(tmp_path):
    with pytest.raises(TenantsFileError, match="admin_key_sha256"):
        _load(tmp_path, GOOD + '    admin_key_sha256: "lw-admin-in-clear"\n')


WITH_ADMIN = GOOD.replace("    policies:", f'    admin_key_sha256: "{hash_key(ADMIN).upper()}"\n    policies:')


def test_a_tenants_admin_key_opens_the_sessions_api_on_the_tenants_namespace(tmp_path):
    directory = _load(tmp_path, WITH_ADMIN)

    credentials = directory.authenticate(f"Bearer {ADMIN}", None, identified=True)

    assert (credentials.tenant.name, credentials.namespace, credentials.admin) == ("acme", "acme", True)
    assert credentials.upstream_authorization is None


def test_an_admin_key_proxies_no_model_call(tmp_path):
    directory = _load(tmp_path, WITH_ADMIN)

    with pytest.raises(AuthenticationFailed):
        directory.authenticate(f"Bearer {ADMIN}", None)


def test_a_tenants_proxy_key_is_no_admin(tmp_path):
    assert not _load(tmp_path, WITH_ADMIN).authenticate(f"Bearer {KEY}", None, identified=True).admin


def test_an_admin_key_that_is_also_a_proxy_key_is_rejected(tmp_path):
    text = GOOD.replace("    policies:", f'    admin_key_sha256: "{hash_key(KEY)}"\n    policies:')

    with pytest.raises(TenantsFileError, match=r"admin_key_sha256: key already belongs to acme"):
        _load(tmp_path, text)


def test_an_admin_key_digest_must_be_a_sha256(tmp_path):
    with pytest.raises(TenantsFileError, match="admin_key_sha256"):
        _load(tmp_path, GOOD.replace("    policies:", '    admin_key_sha256: "nope"\n    policies:'))
