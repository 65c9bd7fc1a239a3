"""The README's quick start and the docs pages' examples say what the code does.

The README is the front door (install, serve, each client, the tests); the reference pages
live in ``docs/``: the configuration table, the tenants example, the mock-judge note.
"""

import hashlib
from pathlib import Path

import pytest
import yaml

from proxy.settings import Settings

ROOT = Path(__file__).parents[2]
README = (ROOT / "README.md").read_text()
CONFIGURATION = (ROOT / "docs" / "reference" / "configuration.md").read_text()
TENANTS = (ROOT / "docs" / "tenants.md").read_text()
LAPTOP = (ROOT / "docs" / "getting-started" / "laptop.md").read_text()


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    level = heading.split(" ", 1)[0]
    body = text.split(heading + "\n", 1)[1]
    for marker in ("\n# ", "\n## ")[: len(level)]:
        body = body.split(marker, 1)[0]
    return body


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_is_documented(name):
    assert f"`--{name.replace('_', '-')}`" in CONFIGURATION
    assert f"`LOOPWARDEN_{name.upper()}`" in CONFIGURATION


def _tenants_example() -> str:
    return TENANTS.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_no_key_in_the_tenants_example_is_usable_as_it_stands(tmp_path):
    """A copied example must not let anyone in: every key entry fails validation until replaced."""
    from proxy.edge.tenants import TenantsFileError, load_tenants

    example = _tenants_example()
    for tenant in yaml.safe_load(example)["tenants"]:
        single = tmp_path / f"{tenant['name']}.yaml"
        single.write_text(yaml.safe_dump({"tenants": [tenant]}))
        with pytest.raises(TenantsFileError, match="key_sha256"):
            load_tenants(single, "https://api.openai.com/v1", {"ACME_OPENAI_KEY": "sk-x"})


def test_the_tenants_page_shows_how_to_hash_a_key():
    assert "loopwarden hash-key" in TENANTS.split("```yaml", 1)[0]
    assert hashlib.sha256(b"password").hexdigest() not in TENANTS


@pytest.mark.parametrize(
    ("reply", "cause"),
    [
        ("Hello from the fake model.", "unparseable"),  # what a mock server answers the judge
        ('{"done": true, "reason": "looks complete"}', "missing_nonce"),
    ],
    ids=["plain-text", "verdict-without-nonce"],
)
def test_the_quick_starts_mock_judge_note_names_the_cause_the_judge_gives(reply, cause):
    from proxy.judge.client import parse_verdict

    note = _section(LAPTOP, "## Trying it with a mock server or a small local model").strip().split("\n\n", 1)[0]
    said = {"unparseable": "for a reply in plain text", "missing_nonce": "for a JSON verdict without the nonce"}

    assert parse_verdict(reply, "n-1234").cause == cause
    assert f'"cause": "{cause}"` {said[cause]}' in " ".join(note.split())


def _sh_blocks(section: str) -> list[str]:
    return [block.split("\n", 1)[1].split("```", 1)[0] for block in section.split("```sh")[1:]]


def test_the_quick_start_makes_a_virtual_environment_before_installing():
    lines = _sh_blocks(_section(README, "## Quick start"))[0].splitlines()

    assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert lines[1] == "pip install ."


def test_the_quick_start_names_both_ports_and_the_flags_that_move_them():
    section = _section(README, "## Quick start")
    serve = _sh_blocks(section)[0]
    settings = Settings(upstream="http://x/v1")

    assert f"127.0.0.1:{settings.port}" in serve
    assert f"127.0.0.1:{settings.metrics_port}" in serve
    assert "`--port`" in section
    assert "`--metrics-port`" in section


def test_the_readmes_test_run_names_what_it_needs():
    (tests,) = _sh_blocks(_section(README, "## Run the tests"))

    assert "redis-server" in tests
    assert "npm ci --prefix tests/agents" in tests
    assert "pip install -e '.[test]'" in tests


SDK_PAGES = ["openai-sdk", "agents-sdk", "langgraph", "smolagents", "pydantic-ai", "anthropic-sdk"]


@pytest.mark.parametrize("page", SDK_PAGES)
def test_the_readme_shows_each_sdk_client_and_links_its_page(page):
    section = _section(README, "## Point your agent at it")

    assert f"(docs/clients/{page}.md)" in section
    assert (ROOT / "docs" / "clients" / f"{page}.md").is_file()


def test_the_agents_sdk_quick_start_turns_tracing_off():
    """Without it the SDK exports every trace to OpenAI, whatever the base URL."""
    section = _section(README, "## Point your agent at it")
    page = (ROOT / "docs" / "clients" / "agents-sdk.md").read_text()

    assert "OPENAI_AGENTS_DISABLE_TRACING=1" in section
    assert "set_tracing_disabled(True)" in page


def test_the_readme_stays_a_front_door():
    assert len(README.splitlines()) <= 250
