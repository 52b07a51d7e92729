"""``sentinel usage``: the current period's consumption per tenant, as text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from sentinel_core.cli._main import main
from tests.support.redis_server import free_port

CONFIG = """
[sentinel]
redis_url = "{url}"

[sentinel.policies."plan.calls"]
algorithm = "quota"
rate = "1000/month"
timezone = "Europe/Berlin"
fail_mode = "closed"

[sentinel.policies."llm.tokens"]
algorithm = "quota"
rate = "100000/month"
cost = 500
settle = true
fail_mode = "closed"

[sentinel.policies."reports.render"]
algorithm = "concurrency"
limit = 4
fail_mode = "closed"

[sentinel.policies."api.read"]
algorithm = "token_bucket"
rate = "5/second"
fail_mode = "closed"
"""


@pytest.fixture
def config_path(tmp_path: Path, redis_url: str) -> str:
    path = tmp_path / "sentinel.toml"
    path.write_text(CONFIG.format(url=redis_url), encoding="utf-8")
    return str(path)


def spend(config_path: str, endpoint_id: str, **tenants: int) -> None:
    sentinel = Sentinel(config_path, registry=CollectorRegistry(), entry_points=False)
    for tenant, count in tenants.items():
        for _ in range(count):
            assert sentinel.evaluate(endpoint_id, tenant).allowed
    sentinel.close()


def test_usage_prints_each_tenants_consumption_of_the_period(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spend(config_path, "plan.calls", acme=3, globex=1)
    assert main(["usage", config_path, "plan.calls", "acme", "globex", "initech"]) == 0
    out = capsys.readouterr().out
    assert "plan.calls (quota 1000/month, periods in Europe/Berlin)" in out
    rows = {line.split()[0]: line.split()[1:3] for line in out.splitlines()[2:]}
    assert rows == {"acme": ["3", "997"], "globex": ["1", "999"], "initech": ["0", "1000"]}
    assert "-01T00:00:00+01:00 .. " in out or "-01T00:00:00+02:00 .. " in out
    # reading counted nothing
    assert main(["usage", config_path, "plan.calls", "acme"]) == 0
    assert " 3 " in capsys.readouterr().out


def test_usage_json_is_one_document_for_billing_exports(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spend(config_path, "plan.calls", acme=2)
    assert main(["usage", config_path, "plan.calls", "acme", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["endpoint_id"] == "plan.calls"
    assert (document["calendar"], document["timezone"], document["limit"]) == (
        "month",
        "Europe/Berlin",
        1000,
    )
    (row,) = document["tenants"]
    assert (row["tenant"], row["used"], row["remaining"]) == ("acme", 2, 998)
    assert row["period_start"].endswith(("T00:00:00+01:00", "T00:00:00+02:00"))


def test_usage_of_a_concurrency_policy_counts_leases_in_flight(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    spend(config_path, "reports.render", acme=2)  # never released: still in flight
    assert main(["usage", config_path, "reports.render", "acme", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["calendar"] is None
    assert document["timezone"] is None
    assert document["tenants"][0]["used"] == 2
    assert document["tenants"][0]["period_start"] is None
    assert main(["usage", config_path, "reports.render", "acme"]) == 0
    out = capsys.readouterr().out
    assert "concurrency 4 in flight" in out
    assert "period" not in out


@pytest.mark.parametrize(
    ("endpoint_id", "message"),
    [("api.read", "is a token_bucket policy"), ("nope", "is no policy")],
)
def test_usage_refuses_other_endpoints(
    config_path: str, endpoint_id: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["usage", config_path, endpoint_id, "acme"]) == 2
    assert message in capsys.readouterr().out


def test_usage_reports_a_configuration_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text("[sentinel]\n", encoding="utf-8")
    assert main(["usage", str(path), "plan.calls", "acme"]) == 2
    assert "configuration error" in capsys.readouterr().out


def test_usage_reports_an_unreachable_store(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = f"redis://127.0.0.1:{free_port()}/0"
    assert main(["usage", config_path, "plan.calls", "acme", "--redis", dead]) == 1
    assert "cannot reach" in capsys.readouterr().out


def test_usage_prints_tenant_arguments_escaped(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["usage", config_path, "plan.calls", "evil\x1b[31m\n"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "  evil\\x1b[31m\\n  " in out


def test_usage_reports_the_units_a_settle_quota_charged(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sentinel = Sentinel(config_path, registry=CollectorRegistry(), entry_points=False)
    sentinel.reserve("llm.tokens", "acme").settle(1234)
    sentinel.reserve("llm.tokens", "acme").settle(66)
    sentinel.close()
    assert main(["usage", config_path, "llm.tokens", "acme"]) == 0
    out = capsys.readouterr().out
    assert "llm.tokens (quota 100000/month, units settled by usage, periods in UTC)" in out
    assert out.splitlines()[2].split()[1:3] == ["1300", "98700"]
    assert main(["usage", config_path, "llm.tokens", "acme", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["settle"] is True
    assert document["tenants"][0]["used"] == 1300
