"""The policy file format, as frozen pydantic models that reject unknown keys.

Names and defaults follow the seed design (``empty_response_max_strikes`` = 3, …), so a
team that knows the original guard finds its knobs. ``policies/_schema.json`` is generated
from these models (``loopwarden policy-schema``) and a test keeps it current.
"""

from __future__ import annotations

from typing import Any, Literal

import regex
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from proxy.policy.permissions import PermissionSettings
from proxy.schemas.compiled import check_schema

__all__ = [
    "BudgetSettings",
    "FinalizeSettings",
    "GoalSettings",
    "GrantCeiling",
    "JudgeSettings",
    "LoopSettings",
    "NoProgressSettings",
    "NudgeTexts",
    "OutputContractSettings",
    "Policy",
    "RecordingSettings",
    "StreamingSettings",
    "ToolArgsSettings",
    "ToolFailureSettings",
]

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
    loop_warning: str = Field(
        "You have already called {call} {count} times with exactly these arguments; the result will "
        "not change. Change the arguments, use another tool, or answer from what you already have.",
        min_length=1,
        description="Placeholders: {call} (tool and arguments, or the repeating cycle), {count}.",
    )
    budget_note: str = Field(
        "Budget note: {remaining}. Converge now: finish the task with what you have, or say clearly what is missing.",
        min_length=1,
        description="Placeholder: {remaining} (what is left of each budget running low).",
    )
    no_progress: str = Field(
        "The last {count} steps added nothing new ({what}). Change your approach, or give your best "
        "answer now from what you have.",
        min_length=1,
        description="Placeholders: {count}, {what}.",
    )
    stalled_progress: str = Field(
        "Not run: your last {count} calls of {tool} returned the same result apart from the arguments you passed "
        "({reason}). New arguments will not help. Use another tool or approach, or answer from what you have.",
        min_length=1,
        description="Placeholders: {count}, {tool}, {reason} (the judge's, or what was seen).",
    )
    judge_not_done: str = Field(
        "You are not done yet: {reason}. Continue working on the task; use the tools if needed.",
        min_length=1,
        description="Placeholder: {reason} (the judge's).",
    )
    judge_unavailable: str = Field(
        "Completion could not be verified. Check that every part of the task is done; if something is "
        "missing, continue working on it, otherwise give your complete final answer.",
        min_length=1,
    )
    short_response: str = Field(
        "Your reply is very short for this task. If the task is not fully done, continue working; "
        "otherwise give your complete final answer.",
        min_length=1,
    )
    output_contract: str = Field(
        "Your answer does not match the required JSON schema:\n{errors}\nReply again with only the corrected JSON.",
        min_length=1,
        description="Placeholder: {errors} (one line per error, path-level).",
    )
    tool_args: str = Field(
        "Your tool call was not executed because its arguments are invalid:\n{errors}\n"
        "Call the tool again with corrected arguments.",
        min_length=1,
        description="Placeholder: {errors} (one line per error, path-level).",
    )


class GrantCeiling(BaseModel):
    """The most the sessions API may grant one session on top of each budget, in total
    (``PATCH /v1/loopwarden/sessions/{id}``); 0: no grants of that budget."""

    model_config = _FROZEN

    steps: int = Field(0, ge=0, description="Steps a session may be granted beyond max_steps.")
    tokens: int = Field(0, ge=0, description="Tokens a session may be granted beyond max_tokens.")
    cost_usd: float = Field(0.0, ge=0, description="USD a session may be granted beyond max_cost_usd.")
    active_secs: float = Field(0.0, ge=0, description="Seconds a session may be granted beyond max_active_secs.")


class BudgetSettings(BaseModel):
    """Per-session budgets beyond steps; unset means unlimited. Ending reasons: budget_*."""

    model_config = _FROZEN

    max_tokens: int | None = Field(None, ge=1, description="Prompt + completion tokens per session.")
    max_cost_usd: float | None = Field(None, gt=0, description="Cost per session, priced by pricing.yaml.")
    max_active_secs: float | None = Field(
        None, gt=0, description="Active time per session: wall time minus gaps longer than idle_gap_secs."
    )
    idle_gap_secs: float = Field(
        120.0, gt=0, description="A pause longer than this (a human approving) is not counted."
    )
    reserve_tokens: int = Field(
        4096, ge=1, description="Output tokens reserved per call when the request sets no max_tokens."
    )
    converge_share: float = Field(
        0.2, ge=0, le=1, description="Below this share of any budget left, the model is asked to converge."
    )
    hard_cost_cap: bool = Field(
        False, description="When the cost budget ends a session, build the summary locally (no last call)."
    )
    grant_ceiling: GrantCeiling = Field(
        default_factory=GrantCeiling,
        description="The most the sessions API may grant a session beyond each budget (absent or 0: no grants).",
    )


class JudgeSettings(BaseModel):
    """The completion judge: is a short answer after tool use really the end of the task?"""

    model_config = _FROZEN

    use_llm_judge: bool = True
    judge_skip_threshold: int = Field(256, ge=0, description="Replies at least this long are not judged.")
    hand_back_check: bool = Field(
        True,
        description="A reply of judge_skip_threshold or more that only asks the user what to do next or only "
        "announces work (little else in it) is judged all the same: a local check, no model call for a real answer.",
    )
    hand_back_min_substance: int = Field(
        100, ge=1, description="A reply with at least this many characters besides questions and plans is an answer."
    )
    hand_back_max_chars: int = Field(
        1500,
        ge=0,
        description="Replies at least this long are never taken for a hand-back (a stream holds no longer).",
    )
    judge_fail_open: bool = Field(False, description="false: a judge timeout or error counts as not done.")
    judge_timeout_secs: float = Field(10.0, gt=0)
    detect_short_response: bool = Field(True, description="Long task + short reply: nudge, even with the judge off.")
    short_response_chars: int = Field(60, ge=1, description="A reply shorter than this is short.")
    long_task_chars: int = Field(300, ge=1, description="A task at least this long is long.")
    judge_max_continues: int = Field(2, ge=0, description="Continuations the judge may ask for, per session.")
    after_max_continues: Literal["end", "pass"] = Field(
        "end",
        description="An answer the judge still finds not done after judge_max_continues: end the session with "
        "a summary (reason incomplete), or pass it.",
    )
    judge_max_input_chars: int = Field(16_000, ge=100, description="Larger judge inputs pass without judging.")
    completion_tools: tuple[str, ...] = Field(("final_answer",), description="Tools that deliver the answer.")
    model: str | None = Field(None, description="Judge model (default: the agent's own).")
    base_url: str | None = Field(None, description="Judge API base URL (default: the tenant's upstream).")
    api_key_env: str | None = Field(None, description="Variable with the judge API key (default: the agent's).")
    structured_output: bool = Field(
        False,
        description="Ask the judge for a strict json_schema response_format. Off: the verdict is asked for "
        "in the prompt and parsed leniently (nonce-checked), which every OpenAI-compatible model accepts; "
        "on, a provider or model without json_schema support fails every judge call.",
    )
    verdict_memory_secs: float = Field(
        300.0,
        ge=0,
        description="A definite verdict is reused this long for the same task and answer (0: always ask).",
    )
    judge_schema_valid_answers: bool = Field(
        False,
        description="Judge answers that already satisfy the JSON schema the request (or the output "
        "contract) asks for. Off: a schema-valid answer is the agent's own definition of done.",
    )


class OutputContractSettings(BaseModel):
    """Structured answers: the final text must be JSON valid against a schema."""

    model_config = _FROZEN

    schema_: dict[str, Any] | None = Field(
        None, alias="schema", description="A JSON Schema every final answer must satisfy (besides response_format)."
    )
    max_retries: int = Field(2, ge=0, le=10, description="Times the model is asked to fix its answer, per request.")
    after_max_retries: Literal["end", "pass"] = Field(
        "end",
        description="An answer still invalid after max_retries: end the session with a summary (reason "
        "invalid_output; a refusal when the request asked for JSON), or pass it flagged output_schema_invalid.",
    )

    @field_validator("schema_")
    @classmethod
    def _compiles(cls, schema: dict[str, Any] | None) -> dict[str, Any] | None:
        if schema is not None:
            check_schema(schema)
        return schema


class LoopSettings(BaseModel):
    """Repeated identical tool calls (and cycles of them): warn, then end with ``loop``."""

    model_config = _FROZEN

    enabled: bool = True
    warn_at: int = Field(
        3, ge=2, description="Calls of the same call, or of a cycle's run, at which the model is warned."
    )
    block_at: int = Field(
        5, ge=2, description="Calls of the same call, or of a cycle's run, at which the session ends (reason: loop)."
    )
    max_period: int = Field(
        3, ge=1, le=10, description="Longest cycle (A-B-A-B is 2) counted as a loop; 1: exact repeats only."
    )
    history: int = Field(60, ge=4, le=500, description="Recent tool calls remembered per session.")
    near_block_at: int = Field(
        6,
        ge=0,
        description="Near repeats (the same call but for case and whitespace in its string arguments: Paris, "
        "paris, 'PARIS '): warned at warn_at, the session ends (reason: loop) at this many calls; 0: off.",
    )

    @model_validator(mode="after")
    def _warn_before_block(self) -> LoopSettings:
        if self.block_at < self.warn_at:
            raise ValueError("block_at must be at least warn_at")
        if self.near_block_at and self.near_block_at < self.warn_at:
            raise ValueError("near_block_at must be 0 or at least warn_at")
        return self


class NoProgressSettings(BaseModel):
    """Steps that add nothing: identical tool results, or the same assistant text again."""

    model_config = _FROZEN

    enabled: bool = True
    repeats: int = Field(3, ge=2, description="Consecutive identical tool results (or texts) that mean no progress.")
    max_strikes: int = Field(2, ge=1, description="Detections before the session ends (the first ones nudge).")
    stalled_results: int = Field(
        3,
        ge=0,
        description="Stalled progress: this many calls of one tool with new arguments whose results are the "
        "same once each call's own argument values are masked, and the model calls it again. The judge (when "
        "on) is asked whether the steps make progress: no nudges, and the max_strikes-th no ends the session "
        "(no_progress); without the judge, a nudge. Asked again every as many more results. 0: off.",
    )
    mask_volatile: bool = Field(
        True,
        description="Compare tool results with their volatile fields masked (timestamps, UUIDs, request ids, "
        "long hex ids, durations), so a result stamped anew each time still counts as the same.",
    )


class ToolArgsSettings(BaseModel):
    """Tool calls checked against the request's ``tools`` before the agent sees them."""

    model_config = _FROZEN

    enabled: bool = True
    max_retries: int = Field(2, ge=0, le=10, description="Times the model is asked to fix a call, per request.")
    after_max_retries: Literal["end", "pass"] = Field(
        "end",
        description="A call still invalid after max_retries: end the session with a summary (reason "
        "invalid_tool_args), or pass it to the agent flagged tool_args_invalid.",
    )


class ToolFailureSettings(BaseModel):
    """A circuit breaker for tools that keep failing."""

    model_config = _FROZEN

    enabled: bool = True
    max_consecutive: int = Field(3, ge=1, description="Consecutive failed tool results that end the session.")
    patterns: tuple[str, ...] = Field(
        (
            r"(?i)^\s*(error|exception|failed|failure)\b",
            r"Traceback \(most recent call last\)",
            r'^\s*\{\s*"error"\s*:',
        ),
        description="Regexes (searched in the first 2,000 characters of a tool result) that mark a failure.",
    )
    shapes: bool = Field(
        True,
        description="Also recognise failures by their shape: HTTP status lines and JSON status fields of 400 "
        "or more, tracebacks, errno names (ECONNREFUSED), non-zero exit codes in shell output.",
    )

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for index, pattern in enumerate(patterns):
            try:
                regex.compile(pattern)
            except regex.error as exc:
                raise ValueError(f"patterns[{index}] is not a valid regex: {exc}") from exc
        return patterns


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
    answer_instruction: str = Field(
        "Stop working on the task now and call no tool but {tool}. Answer by calling {tool} with what you have "
        "found so far, every required field filled in as well as you can; where the schema has room for it, say "
        "what is still missing and the suggested next step.",
        min_length=1,
        description="The last call's instruction when the request's answer tool has a structured schema: "
        "that tool is forced, and its call is the ending ({tool}: its name).",
    )
    max_tokens: int | None = Field(1024, ge=16, description="Cap on the summary call's output tokens.")
    notice: Literal["first", "last", "off"] = Field(
        "first",
        description="Where the ending's notice goes in the agent's answer (the reason, the guard's evidence, how "
        "to go on): before the summary, after it, or nowhere (the X-LoopWarden-Terminated header still says it).",
    )


class RecordingSettings(BaseModel):
    """Opt-in recording of every upstream step (request, reply, verdict) for ``loopwarden replay``.

    Message contents are recorded (keys redacted), so this is off unless the operator turns it on.
    """

    model_config = _FROZEN

    enabled: bool = Field(False, description="Record this policy's sessions (message contents included).")
    jsonl_path: str | None = Field(None, description="Append one JSON line per step to this file.")
    redis_stream: str | None = Field(
        None, min_length=1, description="Add one entry per step to this Redis stream (on --redis-url)."
    )
    max_len: int = Field(100_000, ge=1, description="Approximate cap on the Redis stream's length.")

    @model_validator(mode="after")
    def _one_target(self) -> RecordingSettings:
        if self.enabled and (self.jsonl_path is None) == (self.redis_stream is None):
            raise ValueError("recording needs exactly one target: jsonl_path or redis_stream")
        return self


class GoalSettings(BaseModel):
    """Goal mode: an objective (``X-LoopWarden-Goal`` or the command) keeps the agent working."""

    model_config = _FROZEN

    enabled: bool = Field(True, description="Sessions may enter goal mode.")
    command: str = Field("/goal ", min_length=1, description="A first user message opening with this sets the goal.")
    max_turns: int = Field(10, ge=0, le=1000, description="Continuations per goal.")
    max_active_minutes: float = Field(
        150.0, gt=0, description="Active time per goal (idle gaps, as for the budgets, do not count)."
    )
    max_tool_rounds: int = Field(
        3, ge=1, le=20, description="Replies that only report on the goal, answered in one request before passing."
    )


class StreamingSettings(BaseModel):
    """How a streamed reply reaches the client while the guards may still intervene."""

    model_config = _FROZEN

    reasoning: Literal["hold", "relay"] = Field(
        "hold",
        description="hold: reasoning deltas wait until the reply shows text or a tool call (a reasoning-only "
        "reply is retried unseen); relay: they stream at once (a retried attempt's reasoning stays visible).",
    )


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
    max_steps: int = Field(
        50,
        ge=1,
        description="Upstream calls per session, the graceful ending included: the call that would use the last "
        "step is the ending.",
    )
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)
    output_contract: OutputContractSettings = Field(default_factory=OutputContractSettings)
    permissions: PermissionSettings = Field(default_factory=PermissionSettings)
    loop: LoopSettings = Field(default_factory=LoopSettings)
    no_progress: NoProgressSettings = Field(default_factory=NoProgressSettings)
    tool_args: ToolArgsSettings = Field(default_factory=ToolArgsSettings)
    tool_failures: ToolFailureSettings = Field(default_factory=ToolFailureSettings)
    nudges: NudgeTexts = Field(default_factory=NudgeTexts)
    finalize: FinalizeSettings = Field(default_factory=FinalizeSettings)
    streaming: StreamingSettings = Field(default_factory=StreamingSettings)
    goal: GoalSettings = Field(default_factory=GoalSettings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)
