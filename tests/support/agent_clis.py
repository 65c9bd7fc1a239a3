"""Where the agent CLIs the tests drive are: the npm packages of ``tests/agents/package.json``.

``.ci/run`` installs them (``npm ci --prefix tests/agents``) and names each binary in an
environment variable, which then must exist: a CI run never skips them. Without the
variable, the local install or the PATH is used, and the tests skip when neither has it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["agent_cli"]

_INSTALLED = Path(__file__).resolve().parents[1] / "agents" / "node_modules" / ".bin"


def agent_cli(name: str, variable: str) -> str | None:
    """The ``name`` binary: ``$variable`` (an error when it names nothing), else the local
    install under ``tests/agents``, else the PATH; None when none has it."""
    named = os.environ.get(variable)
    if named:
        if not Path(named).exists():
            raise RuntimeError(f"{variable}={named} does not exist: run `npm ci --prefix tests/agents`")
        return named
    local = _INSTALLED / name
    return str(local) if local.exists() else shutil.which(name)
