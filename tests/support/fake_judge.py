"""A judge that answers from a script: the judge model is the upstream, not what a guard test tests."""

from __future__ import annotations

from proxy.judge.client import JudgeOutcome, JudgeRequest


class FakeJudge:
    """Answers every question with ``outcome`` and keeps the questions.

    Stands in for :class:`proxy.judge.client.Judge`."""

    def __init__(self, outcome: JudgeOutcome) -> None:
        self.outcome = outcome
        self.asked: list[JudgeRequest] = []

    async def decide(self, request: JudgeRequest) -> JudgeOutcome:
        self.asked.append(request)
        return self.outcome
