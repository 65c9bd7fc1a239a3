"""The version is written once, in pyproject.toml; everything else reads it back."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import proxy
from proxy.version import VERSION, package_version

PYPROJECT = Path(__file__).parents[2] / "pyproject.toml"


def _pyproject_version() -> str:
    return str(tomllib.loads(PYPROJECT.read_text())["project"]["version"])


def test_the_version_is_the_one_pyproject_declares():
    assert _pyproject_version() == VERSION
    assert proxy.__version__ == VERSION


def test_a_source_tree_never_installed_reads_its_pyproject(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "x"\nversion = "9.8.7"\n')

    assert package_version("loopwarden-not-installed", pyproject) == "9.8.7"


def test_without_metadata_or_pyproject_the_version_says_it_is_unknown(tmp_path):
    assert package_version("loopwarden-not-installed", tmp_path / "missing.toml") == "0+unknown"
    broken = tmp_path / "pyproject.toml"
    broken.write_text("[project\n")
    assert package_version("loopwarden-not-installed", broken) == "0+unknown"


def test_the_changelogs_latest_release_is_this_version_in_keep_a_changelog_form():
    changelog = (PYPROJECT.parent / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2}|Unreleased)$", changelog, re.M)

    assert releases, "no '## [version] - date' heading"
    assert releases[0][0] == VERSION
    sections = re.findall(r"^### (\w+)", changelog.split("## [", 2)[1], re.M)
    assert set(sections) <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
