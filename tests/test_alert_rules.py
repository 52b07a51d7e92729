"""The alert rules of docs/operations/ against their unit tests, with Prometheus's own
`promtool test rules`: each alert fires on the series its name promises and stays quiet
on the ones it must not page for (docs/operations/prometheus-alerts.test.yml).

promtool is taken from ``PATH`` (CI puts it there: `.ci/run`); where it is missing, from
Debian's ``prometheus`` package, fetched with ``apt-get download`` and unpacked (not
installed: no service starts) into this session's temporary folder. Elsewhere the test
fails, saying how to get promtool: it never skips.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations"
RULES = OPERATIONS / "prometheus-alerts.yml"
RULE_TESTS = OPERATIONS / "prometheus-alerts.test.yml"
DASHBOARD = OPERATIONS / "grafana-dashboard.json"
GRAFANA_VARIABLES = {"$__rate_interval": "5m", "$job": ".*", "$instance": ".*", "$endpoint": ".*"}


@pytest.fixture(scope="session")
def promtool(tmp_path_factory: pytest.TempPathFactory) -> str:
    found = shutil.which("promtool")
    if found is not None:
        return found
    folder = tmp_path_factory.mktemp("promtool")
    try:
        subprocess.run(
            ["apt-get", "download", "prometheus"],
            cwd=folder,
            check=True,
            capture_output=True,
            timeout=600,
        )
        [package] = folder.glob("prometheus_*.deb")
        unpacked = folder / "package"
        subprocess.run(
            ["dpkg-deb", "-x", str(package), str(unpacked)],
            check=True,
            capture_output=True,
            timeout=600,
        )
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        pytest.fail(
            "promtool is not on PATH, and Debian's prometheus package could not be fetched "
            f"({exc}): put promtool on PATH (Debian/Ubuntu: `apt-get install prometheus`, "
            "elsewhere the Prometheus release archive) and run again"
        )
    return str(unpacked / "usr" / "bin" / "promtool")


def _run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=OPERATIONS, capture_output=True, text=True, timeout=300
    )


def test_the_alert_rules_are_valid_prometheus_rules(promtool: str) -> None:
    result = _run(promtool, "check", "rules", RULES.name)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_alert_rules_pass_their_unit_tests(promtool: str) -> None:
    result = _run(promtool, "test", "rules", RULE_TESTS.name)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_every_alert_is_tested_both_firing_and_quiet() -> None:
    rules = yaml.safe_load(RULES.read_text())
    alerts = {rule["alert"] for group in rules["groups"] for rule in group["rules"]}
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test["alert_rule_test"]
    ]
    firing = {case["alertname"] for case in cases if case["exp_alerts"]}
    quiet = {case["alertname"] for case in cases if not case["exp_alerts"]}
    assert firing == alerts
    assert quiet == alerts


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    """Each panel's query, its Grafana variables filled in, checked by promtool as the
    expression of a recording rule."""
    dashboard = json.loads(DASHBOARD.read_text())
    expressions = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    rules = []
    for index, expression in enumerate(expressions):
        for variable, value in GRAFANA_VARIABLES.items():
            expression = expression.replace(variable, value)
        assert "$" not in expression, expression
        rules.append({"record": f"dashboard:query_{index}", "expr": expression})
    rule_file = tmp_path / "dashboard-queries.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rule_file)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
