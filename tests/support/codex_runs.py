"""``codex exec`` against the proxy, with its recommended custom provider (HTTP) or its built-in
one (a WebSocket to the proxy): what the Codex tests run, against either fake upstream."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tests.support.agent_clis import agent_cli
from tests.support.fake_responses import function_call, reasoning, response

__all__ = ["CODEX", "codex", "exec_call"]

CODEX = agent_cli("codex", "LOOPWARDEN_CODEX")


def codex(
    base_url: str,
    home: Path,
    task: str = "How many people live in Lyon?",
    *,
    builtin: bool = False,
    resume: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``codex exec`` with LoopWarden as its provider (the recommended config), or as the
    built-in provider's base URL; ``resume``: ``codex exec resume --last`` with ``task``."""
    home.mkdir(exist_ok=True)
    if builtin:
        config = f'model = "fake-model"\nopenai_base_url = "{base_url}"\n'
    else:
        config = (
            'model = "fake-model"\nmodel_provider = "loopwarden"\n\n[model_providers.loopwarden]\n'
            f'name = "LoopWarden"\nbase_url = "{base_url}"\nenv_key = "LOOPWARDEN_TEST_KEY"\nwire_api = "responses"\n'
        )
    (home / "config.toml").write_text(config)
    env = {**os.environ, "CODEX_HOME": str(home), "LOOPWARDEN_TEST_KEY": "sk-p", "OPENAI_API_KEY": "sk-p"}
    command = [str(CODEX), "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
    command += ["resume", "--last", task] if resume else [task]
    return subprocess.run(command, env=env, cwd=home, capture_output=True, text=True, timeout=120, check=False)


def exec_call(call_id: str, arguments: str = '{"cmd": "echo lyon-522250"}') -> dict[str, Any]:
    """A response that runs one shell command (Codex's ``exec_command`` tool)."""
    return response(reasoning("Run it."), function_call("exec_command", arguments, call_id))
