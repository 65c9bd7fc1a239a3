"""Process settings: from LOOPWARDEN_* variables, frozen, checked at load, credentials masked in logs."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.settings import Settings


def test_a_variable_sets_its_field(monkeypatch):
    monkeypatch.setenv("LOOPWARDEN_READ_TIMEOUT", "12.5")
    monkeypatch.setenv("LOOPWARDEN_REDIS_CLUSTER", "true")

    settings = Settings()

    assert (settings.read_timeout, settings.redis_cluster) == (12.5, True)


def test_an_argument_wins_over_its_variable(monkeypatch):
    monkeypatch.setenv("LOOPWARDEN_PORT", "9000")

    assert Settings(port=9001).port == 9001


@pytest.mark.parametrize(
    ("values", "field"),
    [
        pytest.param({"port": 70000}, "port", id="a-port-out-of-range"),
        pytest.param({"read_timeout": 0}, "read_timeout", id="a-timeout-of-zero"),
        pytest.param({"retry_attempts": 11}, "retry_attempts", id="too-many-attempts"),
        pytest.param({"log_level": "verbose"}, "log_level", id="an-unknown-level"),
        pytest.param({"no_such_setting": 1}, "no_such_setting", id="an-unknown-setting"),
    ],
)
def test_a_bad_value_fails_at_load_naming_its_field(values, field):
    with pytest.raises(ValidationError, match=field):
        Settings(**values)


def test_metrics_are_never_served_on_the_api_port():
    with pytest.raises(ValidationError, match="metrics_port must differ from port"):
        Settings(port=9000, metrics_port=9000)


def test_both_ports_may_be_picked_free():
    assert (Settings(port=0, metrics_port=0).port, Settings(port=0, metrics_port=0).metrics_port) == (0, 0)


@pytest.mark.parametrize(
    ("given", "kept"),
    [("https://api.example.com/v1/", "https://api.example.com/v1"), ("http://up/v1", "http://up/v1"), (None, None)],
)
def test_the_upstream_is_kept_without_a_trailing_slash(given, kept):
    assert Settings(upstream=given).upstream == kept


def test_settings_are_frozen():
    with pytest.raises(ValidationError):
        Settings().port = 1  # type: ignore[misc]


@pytest.mark.parametrize(
    ("field", "url", "shown"),
    [
        pytest.param("redis_url", "redis://:secret@redis:6379/0", "redis://***@redis:6379/0", id="redis-password"),
        pytest.param("upstream", "https://user:pw@api.example.com/v1", "https://***@api.example.com/v1", id="user-pw"),
        pytest.param(
            "otel_endpoint", "http://a@b@collector:4318/v1/traces", "http://***@collector:4318/v1/traces", id="two-at"
        ),
        pytest.param("redis_url", "redis://redis:6379/0", "redis://redis:6379/0", id="no-credentials"),
    ],
)
def test_a_log_line_shows_urls_with_their_credentials_masked(field, url, shown):
    assert Settings(**{field: url}).loggable()[field] == shown


def test_a_log_line_shows_every_setting():
    assert set(Settings().loggable()) == set(Settings.model_fields)


def test_a_console_secret_shorter_than_32_characters_is_refused():
    with pytest.raises(ValidationError, match="console_secret must be at least 32 characters"):
        Settings(upstream="http://up/v1", console_secret="too-short")


def test_the_console_secret_never_shows_in_the_settings_repr():
    settings = Settings(upstream="http://up/v1", console_secret="s" * 40)

    assert "s" * 40 not in repr(settings)
    assert settings.console_secret is not None
    assert settings.console_secret.get_secret_value() == "s" * 40
