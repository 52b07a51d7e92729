"""``flask sentinel check|peek|reset|usage`` (issue 27): the ``sentinel`` commands on the
app's own configuration, registered by ``init_app``, run through Flask's CLI runner.
Exit codes 0 and 2 (1: a check failed or Redis is unreachable), never a traceback."""

from __future__ import annotations

from pathlib import Path

from click.testing import Result
from flask import Flask

from sentinel_flask import rate_limited
from tests.flask.apps import MakeApp
from tests.support.adapter_config import spec_config
from tests.support.redis_admin import RedisAdmin


def invoke(app: Flask, *arguments: str) -> Result:
    result = app.test_cli_runner().invoke(args=["sentinel", *arguments])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_the_group_lists_its_commands(make_app: MakeApp, redis_url: str) -> None:
    result = invoke(make_app(spec_config(redis_url)), "--help")
    assert result.exit_code == 0
    for command in ("check", "peek", "reset", "usage"):
        assert command in result.output


def test_check_reads_app_config(make_app: MakeApp, redis_url: str) -> None:
    result = invoke(make_app(spec_config(redis_url)), "check")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("flask sentinel check: app.config['SENTINEL']\n")
    assert result.output.rstrip().endswith("result: PASS")


def test_check_reads_the_config_file_the_app_names(
    make_app: MakeApp, redis_url: str, tmp_path: Path
) -> None:
    path = tmp_path / "sentinel.toml"
    path.write_text(
        f'[sentinel]\nredis_url = "{redis_url}"\n[sentinel.policies.quiet]\n'
        'algorithm = "sliding_window"\nrate = "1/second"\nfail_mode = "closed"\n',
        encoding="utf-8",
    )
    app = make_app(None, views=None, SENTINEL_CONFIG_FILE=str(path))
    result = invoke(app, "check")
    assert result.exit_code == 0, result.output
    assert f"app.config['SENTINEL_CONFIG_FILE'] ({path})" in result.output


def test_peek_and_reset_a_tenant(
    make_app: MakeApp, redis_url: str, redis_client: RedisAdmin
) -> None:
    app = make_app(spec_config(redis_url))
    result = invoke(app, "peek", "pdftalk.ingest", "acme")
    assert result.exit_code == 0
    assert result.output.startswith(
        "flask sentinel peek: pdftalk.ingest: allowed (2 of 3 would remain, full in "
    )
    result = invoke(app, "reset", "pdftalk.ingest", "acme")
    assert (result.exit_code, result.output) == (
        0,
        "flask sentinel reset: pdftalk.ingest: acme's buckets are full again\n",
    )


def test_an_anonymous_policy_needs_the_device(make_app: MakeApp, redis_url: str) -> None:
    result = invoke(make_app(spec_config(redis_url)), "reset", "auth.login", "1.2.3.4")
    assert result.exit_code == 2
    assert "anonymous policy" in result.output
    assert "Traceback" not in result.output


def test_usage_errors_exit_2_with_the_commands_own_help(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(spec_config(redis_url))
    assert invoke(app, "peek").exit_code == 2
    assert invoke(app, "usage", "pdftalk.ingest", "acme").exit_code == 2
    help_text = invoke(app, "peek", "--help")
    assert help_text.exit_code == 0
    assert "flask sentinel peek" in help_text.output
    assert "--device" in help_text.output


def test_check_reports_a_view_naming_an_unknown_endpoint_id(
    make_app: MakeApp, redis_url: str
) -> None:
    app = make_app(spec_config(redis_url))

    @app.get("/late")
    @rate_limited("no.such.policy")
    def late() -> str:  # registered after init_app: only the first request would see it
        return "late"

    result = invoke(app, "check")
    assert result.exit_code == 2, result.output
    assert "FAIL  app" in result.output
    assert "no.such.policy" in result.output
    assert result.output.rstrip().endswith("result: FAIL (the app: 1 problem)")
    assert "PASS  app" in invoke(make_app(spec_config(redis_url)), "check").output
