"""What ``pip install .`` ships: the policies and the price table, as package data."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
SHIPPED = sorted(p.name for p in (ROOT / "policies").iterdir() if p.suffix in (".yaml", ".json"))


def test_a_plain_install_carries_the_library_the_servers_websockets_need():
    # Without one, uvicorn serves no WebSocket and the Responses socket answers 426 (the test
    # extras pull websockets in for their SDKs, so only the declaration tells).
    with (ROOT / "pyproject.toml").open("rb") as file:
        required = tomllib.load(file)["project"]["dependencies"]

    assert any(requirement.split(">")[0].split("=")[0].strip() in ("websockets", "wsproto") for requirement in required)


def test_the_package_policies_are_the_top_level_policies_directory():
    assert (ROOT / "proxy" / "policies").resolve() == (ROOT / "policies").resolve()


@pytest.mark.slow
def test_the_wheel_carries_every_policy_file_and_the_price_table(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "policies", source / "policies")
    shutil.copytree(ROOT / "proxy", source / "proxy", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path / "out"), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )

    (wheel,) = (tmp_path / "out").glob("loopwarden-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = {Path(n).name: archive.read(n) for n in archive.namelist() if n.startswith("proxy/policies/")}
    assert sorted(shipped) == SHIPPED
    assert {"strict.yaml", "lenient.yaml", "pricing.yaml", "_schema.json"} <= set(shipped)
    assert all(shipped[name] == (ROOT / "policies" / name).read_bytes() for name in SHIPPED)
