"""The version LoopWarden runs, written once: ``pyproject.toml``'s, read back from the installed
package's metadata (``--version``, the OpenAPI document, the start-up log line all show it).

A source tree run without being installed reads the ``pyproject.toml`` beside it instead, so
no second copy of the number exists anywhere to drift.
"""

from __future__ import annotations

import tomllib
from importlib import metadata
from pathlib import Path

__all__ = ["VERSION", "package_version"]

_PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"


def package_version(distribution: str = "loopwarden", pyproject: Path = _PYPROJECT) -> str:
    """The installed distribution's version; else the source tree's ``pyproject.toml``'s; else
    ``0+unknown`` (a copy of the package with neither)."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        pass
    try:
        with pyproject.open("rb") as handle:
            return str(tomllib.load(handle)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "0+unknown"


VERSION = package_version()
