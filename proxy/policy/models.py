"""The policy file format, as frozen pydantic models that reject unknown keys.

Names and defaults follow the seed design (``empty_response_max_strikes`` = 3, …), so a
team that knows the original guard finds its knobs. ``policies/_schema.json`` is generated
from these models (``loopwarden policy-schema``) and a test keeps it current.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["FinalizeSettings", "NudgeTexts", "Policy"]

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class NudgeTexts(BaseModel):
    """What the model is told when a reply is sent back to it."""

    model_config = _FROZEN

    empty_response: str = Field(
        "Your last reply was empty. Continue the task now: call one of the available tools, "
        "or give your final answer if the task is done.",
        min_length=1,
    )
    reasoning_only: str = Field(
        "You reasoned but did not act. Decide now: call one of the available tools, "
        "or write your final answer to the user.",
        min_length=1,
    )


class FinalizeSettings(BaseModel):
    """The graceful ending: one last call without tools, or a summary built locally."""

    model_config = _FROZEN

    use_upstream: bool = Field(True, description="Ask the model for the summary (else build it locally).")
    instruction: str = Field(
        "Stop working on the task now and do not call any tools. Reply to the user with a short summary "
        "in three parts: 1. what you found or did so far; 2. what is still missing or could not be done; "
        "3. the suggested next step.",
        min_length=1,
    )
    max_tokens: int | None = Field(1024, ge=16, description="Cap on the summary call's output tokens.")


class Policy(BaseModel):
    """One policy file. Every threshold of every guard lives here."""

    model_config = _FROZEN

    name: str = Field("default", description="Set from the file name; not written in the file.")
    description: str = ""
    mode: Literal["enforce", "shadow"] = Field(
        "enforce", description="shadow: guards decide and every decision is counted, but traffic is untouched."
    )
    state_fail_mode: Literal["open", "closed"] = Field(
        "open",
        description="When the state store fails: open serves and guards with what the request shows; "
        "closed answers 503.",
    )
    max_attempts: int = Field(4, ge=1, le=20, description="Upstream calls one client request may take.")
    session_ttl_secs: int = Field(86_400, ge=60, description="Idle time after which a session is forgotten.")
    empty_response_max_strikes: int = Field(3, ge=1, le=100)
    reasoning_only_max_strikes: int = Field(3, ge=1, le=100)
    max_steps: int = Field(50, ge=1, description="Upstream calls per session before the graceful ending.")
    nudges: NudgeTexts = Field(default_factory=NudgeTexts)
    finalize: FinalizeSettings = Field(default_factory=FinalizeSettings)
