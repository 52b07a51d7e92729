"""``python manage.py sentinel check|peek|reset|usage`` (issue 27): the ``sentinel``
commands on ``settings.SENTINEL``, through ``call_command`` and once through a real
``manage.py`` process. Exit codes 0 and 2 (1: a check failed or Redis is unreachable),
never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings
from django_harness import Configure

from tests.support.redis_admin import RedisAdmin


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[RedisAdmin]:
    """The store under test, emptied for this test."""
    admin = RedisAdmin(redis_url)
    yield admin
    admin.close()


def command(capsys: pytest.CaptureFixture[str], *arguments: str) -> tuple[int, str]:
    try:
        call_command("sentinel", *arguments)
    except SystemExit as stop:
        code = int(stop.code or 0)
    else:
        code = 0
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_check_reads_settings(configure: Configure, capsys: pytest.CaptureFixture[str]) -> None:
    configure()
    code, out = command(capsys, "check")
    assert code == 0, out
    assert out.startswith("manage.py sentinel check: settings.SENTINEL\n")
    assert "result: PASS" in out


def test_peek_and_reset_a_tenant(
    configure: Configure, redis_client: RedisAdmin, capsys: pytest.CaptureFixture[str]
) -> None:
    configure()
    code, out = command(capsys, "peek", "pdftalk.ingest", "acme")
    assert (code, out.startswith("manage.py sentinel peek: pdftalk.ingest: allowed")) == (0, True)
    code, out = command(capsys, "reset", "pdftalk.ingest", "acme")
    assert (code, out) == (
        0,
        "manage.py sentinel reset: pdftalk.ingest: acme's buckets are full again\n",
    )


def test_an_anonymous_policy_needs_the_device(
    configure: Configure, capsys: pytest.CaptureFixture[str]
) -> None:
    configure()
    code, out = command(capsys, "peek", "auth.login", "1.2.3.4")
    assert (code, "anonymous policy" in out) == (2, True)


def test_usage_errors_and_a_missing_setting_exit_2(
    configure: Configure, capsys: pytest.CaptureFixture[str]
) -> None:
    configure()
    assert command(capsys, "peek")[0] == 2
    with override_settings(SENTINEL=None):
        code, out = command(capsys, "check")
    assert (code, "settings.SENTINEL" in out) == (2, True)


def test_manage_py_runs_it_without_the_jwt_secret(
    tmp_path: Path, redis_url: str, redis_client: RedisAdmin
) -> None:
    (tmp_path / "cli_settings.py").write_text(
        "SECRET_KEY = 'test'\n"
        "INSTALLED_APPS = ['sentinel_django']\n"
        "SENTINEL = {\n"
        f"    'redis_url': {redis_url!r},\n"
        "    'jwt': {'key_env': 'SENTINEL_TEST_UNSET_JWT_KEY'},\n"
        "    'policies': {'api.read': {'algorithm': 'token_bucket', 'rate': '5/second',\n"
        "                              'fail_mode': 'closed'}},\n"
        "}\n",
        encoding="utf-8",
    )
    (tmp_path / "manage.py").write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n",
        encoding="utf-8",
    )
    environment = {
        key: value for key, value in os.environ.items() if key != "SENTINEL_TEST_UNSET_JWT_KEY"
    }
    environment.update(
        DJANGO_SETTINGS_MODULE="cli_settings",
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(Path.cwd()), *sys.path]),
    )

    def manage(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", "sentinel", *arguments],
            cwd=tmp_path,
            env=environment,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    reset = manage("reset", "api.read", "acme")
    assert (reset.returncode, reset.stdout) == (
        0,
        "manage.py sentinel reset: api.read: acme's buckets are full again\n",
    ), reset.stderr
    check = manage("check")
    assert check.returncode == 2
    assert "SENTINEL_TEST_UNSET_JWT_KEY is not set" in check.stdout
    wrong = manage("peek", "api.read")
    assert wrong.returncode == 2
    assert "usage: manage.py sentinel peek" in wrong.stderr
    for result in (reset, check, wrong):
        assert "Traceback" not in result.stdout + result.stderr


def test_check_reports_sentinels_system_check_errors(
    configure: Configure, capsys: pytest.CaptureFixture[str]
) -> None:
    configure(routes={"POST no/such/route": "pdftalk.ingest"})
    code, out = command(capsys, "check")
    assert code == 2, out
    assert "sentinel.E004" in out
    assert "result: FAIL (the app: 1 problem)" in out
