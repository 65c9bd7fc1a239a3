"""The README's configuration reference names every setting, as flag and as variable."""

import hashlib
from pathlib import Path

import pytest
import yaml

from proxy.settings import Settings

README = (Path(__file__).parents[2] / "README.md").read_text()
DOCS = README + "".join(page.read_text() for page in sorted((Path(__file__).parents[2] / "docs").rglob("*.md")))
"""The README and the docs site's pages: a setting may be documented on the page of its feature."""


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_is_documented(name):
    assert f"`--{name.replace('_', '-')}`" in DOCS
    assert f"`LOOPWARDEN_{name.upper()}`" in DOCS


def _tenants_example() -> str:
    section = README.split("## Tenants", 1)[1]
    return section.split("```yaml\n", 1)[1].split("```", 1)[0]


def test_no_key_in_the_tenants_example_is_usable_as_it_stands(tmp_path):
    """A copied example must not let anyone in: every key entry fails validation until replaced."""
    from proxy.edge.tenants import TenantsFileError, load_tenants

    example = _tenants_example()
    for tenant in yaml.safe_load(example)["tenants"]:
        single = tmp_path / f"{tenant['name']}.yaml"
        single.write_text(yaml.safe_dump({"tenants": [tenant]}))
        with pytest.raises(TenantsFileError, match="key_sha256"):
            load_tenants(single, "https://api.openai.com/v1", {"ACME_OPENAI_KEY": "sk-x"})


def test_the_tenants_section_shows_how_to_hash_a_key():
    section = README.split("## Tenants", 1)[1].split("\n## ", 1)[0]

    assert "loopwarden hash-key" in section
    assert hashlib.sha256(b"password").hexdigest() not in README


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

    note = README.split("Trying it with a mock server", 1)[1].split("\n\n", 1)[0]
    said = {"unparseable": "for a reply in plain text", "missing_nonce": "for a JSON verdict without the nonce"}

    assert parse_verdict(reply, "n-1234").cause == cause
    assert f'"cause": "{cause}"` {said[cause]}' in " ".join(note.split())


def _quick_start_blocks() -> list[str]:
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.split("\n", 1)[1] for block in section.split("```sh")[1:]]


def test_the_quick_start_makes_a_virtual_environment_before_installing():
    lines = _quick_start_blocks()[0].splitlines()

    assert lines[0].startswith("python3 -m venv .venv && . .venv/bin/activate")
    assert lines[1] == "pip install ."


def test_the_quick_start_names_both_ports_and_the_flags_that_move_them():
    serve = _quick_start_blocks()[0]
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    settings = Settings(upstream="http://x/v1")

    assert f"127.0.0.1:{settings.port}" in serve
    assert f"127.0.0.1:{settings.metrics_port}" in serve
    assert "`--port`" in section
    assert "`--metrics-port`" in section


def test_the_quick_starts_test_run_names_what_it_needs():
    tests = _quick_start_blocks()[1]

    assert "redis-server" in tests
    assert "npm ci --prefix tests/agents" in tests
    assert "pip install -e '.[test]'" in tests
