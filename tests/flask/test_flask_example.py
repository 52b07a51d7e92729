"""examples/flask_app.py works as its docstring says, on memory:// and on Redis."""

from __future__ import annotations

import http.client
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import jwt
import pytest
import redis
from flask import Flask

from examples import flask_app
from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY, bearer
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def example_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENTINEL_REDIS_URL", raising=False)
    monkeypatch.setenv("SENTINEL_JWT_KEY", JWT_KEY)
    monkeypatch.setenv("SENTINEL_COOKIE_SECRET", COOKIE_SECRET)


@pytest.fixture
def example_app(example_env: None) -> Iterator[Flask]:
    app = flask_app.create_app()
    yield app
    app.extensions["sentinel"].close()


def test_example_runs_on_memory_by_default(example_app: Flask) -> None:
    assert example_app.extensions["sentinel"].config.redis_url == "memory://"


def test_example_guards_its_three_policies(example_app: Flask) -> None:
    client = example_app.test_client()
    tenant = {"Authorization": bearer("tenant-42")}

    assert [client.post("/v1/ingest", headers=tenant).status_code for _ in range(11)] == (
        [200] * 10 + [429]
    )
    # /v1/login is guarded by the routes middleware: 5 a minute per device.
    logins = [client.post("/v1/login") for _ in range(6)]
    assert [r.status_code for r in logins] == [200] * 5 + [429]
    assert logins[0].headers["Set-Cookie"].startswith("sentinel_device=")
    # 5/second refills while the burst of 20 drains: at least 20 pass, then 429s.
    tailor = [client.post("/v1/tailor", headers=tenant).status_code for _ in range(40)]
    assert tailor[:20] == [200] * 20
    assert 429 in tailor
    assert client.get("/health").status_code == 200
    assert client.post("/v1/tailor").status_code == 401


def test_example_takes_its_jwt_key_from_the_environment(example_app: Flask) -> None:
    client = example_app.test_client()
    dev_token = bearer("tenant-42", key=flask_app.DEV_JWT_KEY)

    assert client.post("/v1/tailor", headers={"Authorization": dev_token}).status_code == 401


def test_example_token_command_mints_a_token_the_app_accepts(example_app: Flask) -> None:
    result = example_app.test_cli_runner().invoke(args=["token", "tenant-7"])

    assert result.exit_code == 0
    token = result.output.strip()
    assert jwt.decode(token, JWT_KEY, algorithms=["HS256"])["sub"] == "tenant-7"
    client = example_app.test_client()
    assert client.post("/v1/tailor", headers={"Authorization": f"Bearer {token}"}).status_code == (
        200
    )


def test_example_uses_redis_when_sentinel_redis_url_is_set(
    example_env: None,
    monkeypatch: pytest.MonkeyPatch,
    redis_url: str,
    redis_client: redis.Redis,
) -> None:
    monkeypatch.setenv("SENTINEL_REDIS_URL", redis_url)
    monkeypatch.setenv("SENTINEL_SOCKET_TIMEOUT_MS", "2000")  # a loaded machine is no outage
    app = flask_app.create_app()
    try:
        response = app.test_client().post("/v1/ingest", headers={"Authorization": bearer("t")})
    finally:
        app.extensions["sentinel"].close()

    assert response.status_code == 200
    assert redis_client.dbsize() == 1


def test_example_defaults_are_long_enough_secrets() -> None:
    assert len(flask_app.DEV_JWT_KEY.encode()) >= 32
    assert len(flask_app.DEV_COOKIE_SECRET.encode()) >= 32


def test_example_loads_with_the_flask_command(example_env: None) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "examples.flask_app", "routes"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    for rule in ("/v1/tailor", "/v1/ingest", "/v1/login", "/health"):
        assert rule in result.stdout


@pytest.mark.slow
def test_example_serves_over_http_with_flask_run(example_env: None) -> None:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "flask", "--app", "examples.flask_app", "run", "--port", str(port)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port, server)
        responses = []
        cookie: dict[str, str] = {}
        for _ in range(6):
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("POST", "/v1/login", headers=cookie)
            response = connection.getresponse()
            headers = dict(response.getheaders())
            responses.append((response.status, headers))
            connection.close()
            if "Set-Cookie" in headers:  # a browser's cookie jar, in one line
                cookie = {"Cookie": headers["Set-Cookie"].split(";", 1)[0]}
    finally:
        server.terminate()
        server.wait(timeout=10)

    # One device sending its cookie back: its bucket (5 a minute) decides.
    assert [status for status, _ in responses] == [200] * 5 + [429]
    assert responses[0][1]["Set-Cookie"].startswith("sentinel_device=")
    assert "Set-Cookie" not in responses[1][1]
    assert responses[0][1]["RateLimit"].startswith('"auth.login"')
    denied = responses[-1][1]
    assert denied["Content-Type"] == "application/problem+json"
    assert denied["Retry-After"].isdigit()
    assert "Set-Cookie" not in denied


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert process.poll() is None, "flask run exited"
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            assert time.monotonic() < deadline, "flask run did not listen in time"
            time.sleep(0.05)
