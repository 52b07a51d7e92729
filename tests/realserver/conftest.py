"""Fixtures of the real-server suite: a private redis-server and the example app under a
real multi-process server, per test; and the summary of what was measured."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.realserver.figures import FIGURES
from tests.realserver.servers import DEPLOYMENTS, AppServer, Deployment, Tuning, warm_up
from tests.support.redis_server import RedisServer

REPORT = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "realserver.json"


@pytest.fixture(params=DEPLOYMENTS, ids=[deployment.name for deployment in DEPLOYMENTS])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """This test's own redis-server (killed, paused and restarted at will)."""
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def serve(
    deployment: Deployment, redis: RedisServer, tmp_path: Path
) -> Iterator[Callable[[Tuning], AppServer]]:
    """Starts the deployment on ``redis`` with the given tuning, every worker warmed up;
    the process group is ended after the test, whatever happened."""
    servers: list[AppServer] = []

    def start(tuning: Tuning) -> AppServer:
        server = AppServer(deployment, redis.url, tuning, tmp_path / f"server-{len(servers)}")
        servers.append(server)
        server.start()
        warm_up(server)
        return server

    yield start
    for server in servers:
        server.close()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not FIGURES:
        return
    text = json.dumps(FIGURES, indent=2, sort_keys=True)
    terminalreporter.write_sep("=", "real-server figures")
    terminalreporter.write_line(text)
    report = Path(os.environ.get("SENTINEL_REALSERVER_REPORT", REPORT))
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(text + "\n")
    terminalreporter.write_line(f"written to {report}")
