"""The Grafana dashboard and the Prometheus alerts only use metrics and labels that exist."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sentinel_core import Sentinel
from tests.conftest import make_config
from tests.support.redis_server import free_port

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations"
_SELECTOR = re.compile(r"\b(sentinel_[a-z_]+)\s*(\{[^}]*\})?")
_LABEL = re.compile(r"([a-z_]+)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\bby\s*\(([^)]*)\)")
_SERIES_SUFFIXES = ("_bucket", "_count", "_sum", "_created", "_total")


def _exposed_series() -> dict[str, set[str]]:
    """Every series name a Sentinel exposes, with its label names, after a shadow
    policy's would-be denial, Redis failures and a breaker trip."""
    registry = CollectorRegistry()
    dead = f"redis://127.0.0.1:{free_port()}/0"
    search = {"algorithm": "token_bucket", "rate": "1/second", "fail_mode": "closed"}
    config = make_config(dead, api__search=search, api__trial={**search, "shadow": True})
    config["breaker"] = {"failure_threshold": 2}
    sentinel = Sentinel(config, registry=registry, entry_points=False)
    sentinel.evaluate("api.trial", "tenant-a")  # a shadow policy's would-be denial
    sentinel.evaluate("api.search", "tenant-a")
    sentinel.evaluate("api.search", "tenant-a")
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    return series


def _expressions() -> list[str]:
    dashboard = json.loads((OPERATIONS / "grafana-dashboard.json").read_text())
    panel_exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    templating = [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    alerts = yaml.safe_load((OPERATIONS / "prometheus-alerts.yml").read_text())
    alert_exprs = [rule["expr"] for group in alerts["groups"] for rule in group["rules"]]
    return panel_exprs + templating + alert_exprs


def _base(name: str, exposed: dict[str, Any]) -> str:
    if name in exposed:
        return name
    for suffix in _SERIES_SUFFIXES:
        if name.endswith(suffix) and name.removesuffix(suffix) + "_bucket" in exposed:
            return name.removesuffix(suffix) + "_bucket"
    return name


def test_every_metric_and_label_used_exists_in_the_exposition() -> None:
    exposed = _exposed_series()
    used = 0
    for expr in _expressions():
        for match in _SELECTOR.finditer(expr):
            name = _base(match.group(1), exposed)
            assert name in exposed, f"{match.group(1)} (in {expr!r}) is not exposed"
            labels = _LABEL.findall(match.group(2) or "")
            assert set(labels) <= exposed[name] | {"job", "instance"}, expr
            used += 1
        for grouping in _GROUPING.findall(expr):
            names = {label.strip() for label in grouping.split(",")}
            known = set().union(*exposed.values()) | {"job", "instance"}
            assert names <= known, expr
    assert used >= 10


@pytest.mark.parametrize(
    "rule_name", ["SentinelBreakerOpen", "SentinelFailClosedDenials", "SentinelRedisTimeouts"]
)
def test_alert_rules_are_complete(rule_name: str) -> None:
    alerts = yaml.safe_load((OPERATIONS / "prometheus-alerts.yml").read_text())
    rules = {rule["alert"]: rule for group in alerts["groups"] for rule in group["rules"]}
    rule = rules[rule_name]
    assert rule["expr"].strip()
    assert re.fullmatch(r"\d+[smh]", rule["for"])
    assert rule["labels"]["severity"] in {"page", "ticket"}
    assert rule["annotations"]["summary"]


def test_breaker_alert_waits_two_minutes() -> None:
    alerts = yaml.safe_load((OPERATIONS / "prometheus-alerts.yml").read_text())
    rules = {rule["alert"]: rule for group in alerts["groups"] for rule in group["rules"]}
    assert rules["SentinelBreakerOpen"]["for"] == "2m"
    assert "sentinel_breaker_state" in rules["SentinelBreakerOpen"]["expr"]


def test_the_dashboard_can_be_narrowed_to_a_job_and_an_instance() -> None:
    dashboard = json.loads((OPERATIONS / "grafana-dashboard.json").read_text())
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"job", "instance", "endpoint"} <= variables
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for match in _SELECTOR.finditer(target["expr"]):
                assert 'job=~"$job"' in (match.group(2) or ""), target["expr"]
                assert 'instance=~"$instance"' in (match.group(2) or ""), target["expr"]


def test_the_dashboard_has_a_shadow_mode_panel() -> None:
    dashboard = json.loads((OPERATIONS / "grafana-dashboard.json").read_text())
    shadow = [
        panel
        for panel in dashboard["panels"]
        if any("sentinel_shadow_denials_total" in t["expr"] for t in panel["targets"])
    ]
    assert shadow
    assert all("shadow" in panel["title"].lower() for panel in shadow)


def test_dashboard_is_well_formed() -> None:
    dashboard = json.loads((OPERATIONS / "grafana-dashboard.json").read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(panel["targets"] for panel in dashboard["panels"])
    assert dashboard["uid"]
