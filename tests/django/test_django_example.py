"""examples/django_app works as its docstring says, on memory:// and on Redis.

The example is a project of its own (its own settings module), so it runs in a child
process, as ``manage.py`` would run it, not inside this suite's configured Django.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.redis_admin import RedisAdmin
from tests.support.redis_server import RedisServer

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "django_app"

DRIVER = """
import json, sys, time
import django
from django.test import Client
from django.test.utils import setup_test_environment
django.setup()
setup_test_environment()
from manage import dev_token
auth = {"Authorization": "Bearer " + dev_token("tenant-42")}
client = Client()
tailor, start = [], time.monotonic()
while 429 not in tailor and len(tailor) < 60:
    tailor.append(client.post("/v1/tailor", headers=auth).status_code)
report = {
    "tailor": tailor,
    "tailor_seconds": time.monotonic() - start,
    "ingest": [client.post("/v1/ingest", headers=auth).status_code for _ in range(11)],
    "login": [client.post("/v1/login").status_code for _ in range(6)],
    "unauthenticated": client.post("/v1/ingest").status_code,
    "cookie": client.cookies["sentinel_device"]["httponly"],
}
json.dump(report, sys.stdout)
"""


def _run(*args: str, redis_url: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
    env.pop("SENTINEL_REDIS_URL", None)
    if redis_url is not None:
        env["SENTINEL_REDIS_URL"] = redis_url
        env["SENTINEL_SOCKET_TIMEOUT_MS"] = "2000"  # a loaded CI machine is not an outage
    return subprocess.run(
        [sys.executable, *args],
        cwd=EXAMPLE,
        env={**env, "DJANGO_SETTINGS_MODULE": "settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _drive(redis_url: str | None = None) -> dict[str, object]:
    """The example's answers; ``tailor`` is checked here: burst 20 at 5/second, so the
    first 429 comes after 20 admissions plus what refilled while they were sent (a
    cluster client per request, as async views get under WSGI, takes time)."""
    result = _run("-c", DRIVER, redis_url=redis_url)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    tailor, seconds = report.pop("tailor"), report.pop("tailor_seconds")
    assert tailor == [200] * (len(tailor) - 1) + [429]
    assert 20 <= len(tailor) - 1 <= 20 + 5 * seconds
    return report


EXPECTED = {
    "ingest": [202] * 10 + [429],  # 10/minute
    "login": [200] * 5 + [429],  # 5/minute per device and IP
    "unauthenticated": 401,
    "cookie": True,
}


def test_example_runs_on_memory_by_default() -> None:
    assert _drive() == EXPECTED


def test_example_runs_on_redis_when_sentinel_redis_url_is_set(redis_url: str) -> None:
    report = _drive(redis_url)
    client = RedisAdmin(redis_url)
    keys = client.dbsize()
    client.close()

    assert report == EXPECTED
    assert keys > 0  # the buckets live in Redis, not in the child process


def test_example_passes_manage_py_check() -> None:
    result = _run("manage.py", "check")

    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_example_check_deploy_reports_an_unfit_redis(lru_redis_server: RedisServer) -> None:
    result = _run("manage.py", "check", "--deploy", redis_url=lru_redis_server.url)

    assert result.returncode != 0
    assert "sentinel.E003" in result.stderr
    assert "allkeys-lru" in result.stderr
