"""The Grafana dashboard queries only metrics inferbus exports; compose provisions it."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tracing.metrics import REGISTRY

ROOT = Path(__file__).parents[3]
DASHBOARD = ROOT / "infra" / "grafana" / "dashboards" / "inferbus.json"

PROMQL_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan"})
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
NAME = re.compile(r"(?<![\w.$])[A-Za-z_:][A-Za-z0-9_:]*")


def metric_names(expr: str) -> set[str]:
    """Metric names in a PromQL expression: what is left after strings, label matchers,
    ranges, grouping clauses, function calls, keywords and Grafana variables."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = GROUPING.sub(" ", text)
    names = set()
    for match in NAME.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function call, e.g. rate(
        if match.group().lower() not in PROMQL_KEYWORDS:
            names.add(match.group())
    return names


def variable_expr(query: str) -> str | None:
    """The PromQL inside a Grafana template query, or None for one that names no metric."""
    label_values = re.fullmatch(r"\s*label_values\((.*)\)\s*", query)
    if label_values:
        args = label_values.group(1)
        return args.rsplit(",", 1)[0] if "," in args else None
    result = re.fullmatch(r"\s*query_result\((.*)\)\s*", query)
    if result:
        return result.group(1)
    raise AssertionError(f"template query form not understood by this test: {query!r}")


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) for every panel target, annotation and Prometheus template variable."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            yield item
            yield from panels(item.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield f"panel {panel.get('title')!r} {target.get('refId')}", target["expr"]
    for annotation in dashboard.get("annotations", {}).get("list", []):
        expr = annotation.get("expr") or annotation.get("target", {}).get("expr")
        if expr:
            yield f"annotation {annotation['name']!r}", expr
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        expr = variable_expr(query["query"] if isinstance(query, dict) else query)
        if expr is not None:
            yield f"variable ${variable['name']}", expr


def exported_names() -> set[str]:
    """Every series name REGISTRY can expose, suffixes included."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_sum", "_count", "_created"),
        "summary": ("", "_sum", "_count", "_created"),
    }
    names = set()
    for family in REGISTRY.collect():
        for suffix in suffixes.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def unknown_metrics(dashboard: dict[str, Any]) -> dict[str, set[str]]:
    """Per query: the metric names it uses that REGISTRY does not export."""
    exported = exported_names()
    return {
        where: unknown
        for where, expr in queries(dashboard)
        if (unknown := metric_names(expr) - exported)
    }


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        pytest.param("inferbus_replicas", {"inferbus_replicas"}, id="bare"),
        pytest.param('up{job="x", a=~"b.c"}', {"up"}, id="matchers"),
        pytest.param("rate(foo_total[5m])", {"foo_total"}, id="function-and-range"),
        pytest.param(
            "histogram_quantile(0.99, sum by (le, model) "
            '(rate(h_bucket{m=~"$m"}[$__rate_interval])))',
            {"h_bucket"},
            id="quantile-grouping-variable",
        ),
        pytest.param(
            "sum without (instance) (a) / on (group) group_left (x) b > bool 1e3",
            {"a", "b"},
            id="binary-operators",
        ),
        pytest.param("x_seconds * 1000 offset 5m", {"x_seconds"}, id="scalar-and-offset"),
        pytest.param("a and b unless c or d", {"a", "b", "c", "d"}, id="set-operators"),
    ],
)
def test_metric_names_are_extracted(expr: str, expected: set[str]) -> None:
    assert metric_names(expr) == expected


def test_a_metric_nobody_exports_is_reported() -> None:
    fake = {
        "panels": [
            {
                "title": "row",
                "panels": [
                    {"title": "ghost", "targets": [{"refId": "A", "expr": "rate(ghost_total[1m])"}]}
                ],
            }
        ],
        "annotations": {"list": [{"name": "n", "expr": "phantom_gauge > 0"}]},
        "templating": {
            "list": [{"name": "v", "type": "query", "query": "label_values(spectre, label)"}]
        },
    }
    assert unknown_metrics(fake) == {
        "panel 'ghost' A": {"ghost_total"},
        "annotation 'n'": {"phantom_gauge"},
        "variable $v": {"spectre"},
    }


def test_every_dashboard_query_names_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    found = list(queries(dashboard))
    assert len(found) >= 12
    for where, expr in found:
        assert metric_names(expr), f"{where} names no metric: {expr}"
    assert unknown_metrics(dashboard) == {}


def test_the_dashboard_shows_what_operators_asked_for(dashboard: dict[str, Any]) -> None:
    used = {name for _, expr in queries(dashboard) for name in metric_names(expr)}
    assert {
        "inferbus_arrival_rps",
        "inferbus_service_rps",
        "inferbus_group_lag_messages",
        "inferbus_oldest_age_seconds",
        "inferbus_group_p99_seconds",
        "inferbus_slo_p99_e2e_seconds",
        "inferbus_replicas",
        "inferbus_replicas_desired",
        "inferbus_batch_size_bucket",
        "inferbus_scaler_decision_timestamp_seconds",
    } <= used
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"model", "tier"} <= variables
    annotations = [a for a in dashboard["annotations"]["list"] if "expr" in a]
    assert any("inferbus_scaler_decision" in a["expr"] for a in annotations)


def test_compose_provisions_the_dashboard_and_its_datasource(dashboard: dict[str, Any]) -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"])
    provider = yaml.safe_load(
        (ROOT / "infra/grafana/provisioning/dashboards/inferbus.yml").read_text()
    )["providers"][0]
    assert mounts["./infra/grafana/dashboards"] == provider["options"]["path"]
    sources = yaml.safe_load(
        (ROOT / "infra/grafana/provisioning/datasources/datasources.yml").read_text()
    )["datasources"]
    provisioned = {source.get("uid") for source in sources}
    refs = [
        *(p["datasource"] for p in dashboard["panels"]),
        *(t["datasource"] for p in dashboard["panels"] for t in p["targets"]),
        *(a["datasource"] for a in dashboard["annotations"]["list"] if "expr" in a),
        *(v["datasource"] for v in dashboard["templating"]["list"] if v["type"] == "query"),
    ]
    assert {ref["uid"] for ref in refs} <= provisioned
