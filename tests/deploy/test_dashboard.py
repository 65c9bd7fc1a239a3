"""The shipped Grafana dashboard: every query names a metric the proxy registers, with its real
labels; every query follows the tenant and policy variables; the panels an operator needs are there."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client.metrics import MetricWrapperBase

from proxy.observe.metrics import Metrics

DASHBOARD_FILE = Path(__file__).parents[2] / "helm" / "loopwarden" / "dashboards" / "loopwarden.json"
DASHBOARD = json.loads(DASHBOARD_FILE.read_text())
PANELS = DASHBOARD["panels"]
SELECTOR = re.compile(r"(loopwarden_\w+)(\{[^}]*\})?")
SUFFIX = re.compile(r"_(total|bucket|sum|count)$")


def registered() -> dict[str, set[str]]:
    """Every metric the proxy registers (as Prometheus names its series, without suffix) → its labels."""
    return {
        value._name: set(value._labelnames)
        for value in vars(Metrics()).values()
        if isinstance(value, MetricWrapperBase)
    }


def queries() -> list[tuple[str, str]]:
    return [(panel["title"], target["expr"]) for panel in PANELS for target in panel["targets"]]


def selectors() -> list[tuple[str, str, str]]:
    """(panel, metric without suffix, its label selector) for every metric every query reads."""
    return [
        (title, SUFFIX.sub("", name), selector or "")
        for title, expr in queries()
        for name, selector in SELECTOR.findall(expr)
    ]


def test_every_metric_a_panel_queries_is_one_the_proxy_registers():
    known = registered()

    unknown = {(title, metric) for title, metric, _ in selectors() if metric not in known}

    assert selectors()
    assert unknown == set()


def test_every_label_a_query_names_is_one_its_metric_has():
    known = registered()

    for title, metric, selector in selectors():
        named = set(re.findall(r"(\w+)\s*=~?", selector))
        assert named <= known[metric], (title, metric, named - known[metric])
    for title, expr in queries():
        for by in re.findall(r"by \(([^)]*)\)", expr):
            grouped = {label.strip() for label in by.split(",")} - {"le"}
            read = {metric for _, metric, _ in selectors() if metric in expr}
            assert any(grouped <= known[metric] for metric in read), (title, grouped)


@pytest.mark.parametrize("variable", ["tenant", "policy"])
def test_every_query_follows_the_tenant_and_policy_variables(variable):
    known = registered()

    unscoped = [
        (title, metric)
        for title, metric, selector in selectors()
        if variable in known[metric] and f'{variable}=~"${variable}"' not in selector
    ]

    assert unscoped == []


@pytest.mark.parametrize("variable", ["tenant", "policy"])
def test_tenant_and_policy_are_template_variables_allowing_several_and_all(variable):
    found = {v["name"]: v for v in DASHBOARD["templating"]["list"]}[variable]

    assert (found["type"], found["multi"], found["includeAll"], found["allValue"]) == ("query", True, True, ".*")
    assert "label_values(loopwarden_" in found["definition"]
    assert f", {variable})" in found["definition"]


@pytest.mark.parametrize(
    ("metric", "grouped"),
    [
        pytest.param("loopwarden_terminations_total", {"tenant", "policy", "reason"}, id="ending-reasons"),
        pytest.param("loopwarden_judge_errors_total", {"cause"}, id="judge-errors"),
        pytest.param("loopwarden_interventions_total", {"guard"}, id="interventions-per-guard"),
        pytest.param("loopwarden_budget_grants_total", {"budget"}, id="budget-grants"),
    ],
)
def test_the_dashboard_shows_what_operators_ask_about(metric, grouped):
    def groups(expr: str) -> set[str]:
        return {label.strip() for by in re.findall(r"by \(([^)]*)\)", expr) for label in by.split(",")}

    assert any(metric in expr and grouped <= groups(expr) for _, expr in queries())


def test_panels_have_unique_ids_and_do_not_overlap():
    cells = [
        (x, y)
        for panel in PANELS
        for x in range(panel["gridPos"]["x"], panel["gridPos"]["x"] + panel["gridPos"]["w"])
        for y in range(panel["gridPos"]["y"], panel["gridPos"]["y"] + panel["gridPos"]["h"])
    ]

    assert len({panel["id"] for panel in PANELS}) == len(PANELS)
    assert len(cells) == len(set(cells))
