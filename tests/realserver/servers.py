"""The example apps under real multi-process servers, as they are deployed.

Each `AppServer` is a uvicorn or gunicorn process group on a free loopback port, with
its own Redis URL, JWT key and ``PROMETHEUS_MULTIPROC_DIR``. It is started in a new
session so that `close` can end the whole group (the supervisor and every worker) by
its id, whatever state the test left it in.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.realserver.load import Request, run
from tests.realserver.metrics import ServerMetrics
from tests.support.redis_server import free_port
from tests.support.tokens import HS_SECRET

ROOT = Path(__file__).resolve().parents[2]
INGEST = "/v1/ingest"
"""Tenant sliding window, 10/minute, fail-closed (in every example)."""
TAILOR = "/v1/tailor"
"""Tenant token bucket, burst 20 at 5/second, fail-open at 2/second per process."""


@dataclass(frozen=True)
class Deployment:
    """One way of serving one example app.

    Args:
        name: the test id.
        argv: the server command after ``python -m``; ``{port}`` is filled in.
        cwd: where the server runs (the app's import root).
        processes: worker processes (each with its own Sentinel, breaker and
            emergency limiter).
        concurrency: requests the load client keeps in flight: never more than the
            server can work on at once, so a request never waits behind another one
            that is stuck on Redis and its latency is its own.
        ingest_status: what an admitted ``POST /v1/ingest`` answers.
    """

    name: str
    argv: tuple[str, ...]
    cwd: Path
    processes: int
    concurrency: int
    ingest_status: int = 200


def gunicorn(app: str, *options: str) -> tuple[str, ...]:
    return ("gunicorn", *options, "--bind", "127.0.0.1:{port}", "--log-level", "warning", app)


def uvicorn(workers: int) -> tuple[str, ...]:
    """The FastAPI example under uvicorn with ``workers`` processes."""
    return (
        "uvicorn",
        "examples.fastapi_app:app",
        "--workers",
        str(workers),
        "--host",
        "127.0.0.1",
        "--port",
        "{port}",
        "--log-level",
        "warning",
        "--no-access-log",
    )


DEPLOYMENTS = (
    Deployment(
        "fastapi-uvicorn-w4",
        uvicorn(4),
        ROOT,
        processes=4,
        concurrency=8,
    ),
    Deployment(
        "flask-gunicorn-w4",
        gunicorn("examples.flask_app:app", "-w", "4"),
        ROOT,
        processes=4,
        concurrency=4,
    ),
    Deployment(
        "flask-gunicorn-w2-threads8",
        gunicorn("examples.flask_app:app", "-w", "2", "--threads", "8"),
        ROOT,
        processes=2,
        concurrency=8,
    ),
    Deployment(
        "django-gunicorn-w4",
        gunicorn("wsgi:application", "-w", "4"),
        ROOT / "examples" / "django_app",
        processes=4,
        concurrency=4,
        ingest_status=202,
    ),
    Deployment(
        "django-gunicorn-w2-threads8",
        gunicorn("wsgi:application", "-w", "2", "--threads", "8"),
        ROOT / "examples" / "django_app",
        processes=2,
        concurrency=8,
        ingest_status=202,
    ),
)


@dataclass(frozen=True)
class Tuning:
    """What the example reads from the environment: the Redis budget, the breaker, and
    ``resumint.tailor``'s fail-open allowance (its rate, per process or per fleet)."""

    socket_timeout_ms: int
    open_seconds: int = 30
    fallback_rate: str = "2/second"
    fallback_scope: str = "process"
    fleet_heartbeat_seconds: int = 5


class AppServer:
    def __init__(
        self, deployment: Deployment, redis_url: str, tuning: Tuning, directory: Path
    ) -> None:
        self.deployment = deployment
        self.tuning = tuning
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.metrics = ServerMetrics(directory / "prometheus")
        self.metrics.directory.mkdir(parents=True)
        self._log = directory / "server.log"
        self._redis_url = redis_url
        self._process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> AppServer:
        argv = [part.format(port=self.port) for part in self.deployment.argv]
        env = {key: value for key, value in os.environ.items() if not key.startswith("DJANGO_")}
        env.pop("PYTHONDEVMODE", None)  # serve as in production, not under asyncio debug
        env.update(
            SENTINEL_REDIS_URL=self._redis_url,
            SENTINEL_JWT_KEY=HS_SECRET,
            SENTINEL_SOCKET_TIMEOUT_MS=str(self.tuning.socket_timeout_ms),
            SENTINEL_BREAKER_OPEN_SECONDS=str(self.tuning.open_seconds),
            SENTINEL_FALLBACK_RATE=self.tuning.fallback_rate,
            SENTINEL_FALLBACK_SCOPE=self.tuning.fallback_scope,
            SENTINEL_FLEET_HEARTBEAT_SECONDS=str(self.tuning.fleet_heartbeat_seconds),
            PROMETHEUS_MULTIPROC_DIR=str(self.metrics.directory),
            DJANGO_DEBUG="0",
        )
        with self._log.open("wb") as log:
            self._process = subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=self.deployment.cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_until_serving(timeout)
        return self

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        """End the process group: SIGTERM, then SIGKILL what is left after 10 s."""
        process, self._process = self._process, None
        if process is not None:
            end_process_group(process)

    def _wait_until_serving(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(base_url=self.base_url, timeout=2.0) as client:
            while True:
                assert self._process is not None
                if self._process.poll() is not None:
                    raise AssertionError(f"{self.deployment.name} exited:\n{self.log()}")
                with contextlib.suppress(httpx.TransportError):
                    if client.get("/health").status_code == 200:
                        return
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.deployment.name} not serving:\n{self.log()}")
                time.sleep(0.1)


def end_process_group(process: subprocess.Popen[bytes]) -> None:
    """End the process group ``process`` leads (started with ``start_new_session``):
    SIGTERM, then SIGKILL what is left after 10 s (workers and a reloader's children can
    outlive their supervisor)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def warm_up(server: AppServer, timeout: float = 60.0) -> None:
    """Send guarded requests (fresh tenants) until every worker has decided one: each has
    built its Sentinel, run its start-up check and holds Redis connections."""
    deadline = time.monotonic() + timeout
    processes = server.deployment.processes
    for round_ in itertools.count():
        burst = [Request(TAILOR, f"warm-{round_}-{i}") for i in range(4 * processes)]
        run(server.base_url, burst, concurrency=server.deployment.concurrency)
        deciding = [pid for pid, count in server.metrics.decisions_by_process().items() if count]
        if len(deciding) >= processes:
            return
        assert time.monotonic() < deadline, f"only {len(deciding)} workers decide:\n{server.log()}"
