"""Guards touch nothing: the permission and judge guards write no metrics; what they saw on the
way to a verdict rides on it (``seen``: see test_permissions and test_premature_stop), and the
step log counts it, so production, replay and tests build the same guard set."""

from __future__ import annotations

from proxy.exchange import Usage
from proxy.guards import default_request_guards, default_response_guards
from proxy.judge.client import JudgeOutcome
from proxy.observe.metrics import Metrics
from tests.support.fake_judge import FakeJudge


def test_the_guards_are_built_without_metrics():
    """Nothing a guard could write to: the same set serves, replays and tests."""
    judge = FakeJudge(JudgeOutcome(True, "", Usage(10, 2), 0))
    names = [type(g).__name__ for g in default_response_guards(judge)]  # type: ignore[arg-type]

    assert "PermissionGuard" in [type(g).__name__ for g in default_request_guards()]
    assert names[-1] == "PrematureStopGuard"
    assert "PermissionGuard" in names
    assert not any(isinstance(v, Metrics) for g in default_response_guards() for v in vars(g).values())
