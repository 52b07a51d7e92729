"""Concurrency leases on real multi-process servers (issue 18): uvicorn with 4 workers
(ASGI) and gunicorn with 4 workers of 50 threads (WSGI), each worker its own Sentinel,
the leases shared through Redis (a single server, or the local Redis Cluster). Each
server runs an app written against the framework-neutral facade and one written with
its adapter (FastAPI, Flask), whose completion step hands the leases back.

The app (`tests.realserver.concurrency_app`) counts its running handlers in a separate
Redis, so the tests see the overlap the servers really had, not what Sentinel says.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import redis
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel
from tests.realserver import concurrency_app
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer, free_port
from tests.support.tokens import bearer, hs256

pytestmark = [pytest.mark.slow, pytest.mark.realserver]

ROOT = Path(__file__).resolve().parents[2]
APP = "tests.realserver.concurrency_app"


@dataclass(frozen=True)
class Deployment:
    name: str
    argv: tuple[str, ...]
    cancels_on_disconnect: bool = False
    """Whether a client that goes away cancels a handler that is not streaming."""


def _uvicorn(app: str) -> tuple[str, ...]:
    options = "--workers 4 --host 127.0.0.1 --port {port} --log-level warning"
    return ("uvicorn", app, *options.split(), "--no-access-log", "--lifespan", "on")


def _gunicorn(app: str) -> tuple[str, ...]:
    options = "-w 4 -k gthread --threads 50 --bind 127.0.0.1:{port} --log-level warning"
    return ("gunicorn", *options.split(), "--graceful-timeout", "2", app)


ADAPTERS = "tests.realserver.concurrency_adapters"
DEPLOYMENTS = (
    Deployment("facade-uvicorn-w4", _uvicorn(f"{APP}:asgi_app"), cancels_on_disconnect=True),
    Deployment("facade-gunicorn-w4-threads50", _gunicorn(f"{APP}:wsgi_app")),
    Deployment("fastapi-uvicorn-w4", _uvicorn(f"{ADAPTERS}:fastapi_app")),
    Deployment("flask-gunicorn-w4-threads50", _gunicorn(f"{ADAPTERS}:flask_app")),
)
AUTH = {"Authorization": bearer(hs256("acme", ttl=3_600))}
"""Tenant acme's token: the adapters take tenants from it, the facade app ignores it."""


class Server:
    """One server process group on a free port, ended by its group id."""

    def __init__(self, deployment: Deployment, env: dict[str, str], log: Path) -> None:
        self.deployment = deployment
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        argv = [part.format(port=self.port) for part in deployment.argv]
        environment = {**os.environ, **env}
        environment.pop("PYTHONDEVMODE", None)
        self._log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", *argv],
                cwd=ROOT,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.log()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, self.log()
            time.sleep(0.1)

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:]

    def close(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=10)


@dataclass
class Stack:
    server: Server
    overlap: redis.Redis
    sentinel: Sentinel
    """A Sentinel of the test's own on the same store, to read the leases."""

    def in_flight(self, tenant: str = "acme") -> int:
        return self.sentinel.usage(concurrency_app.ENDPOINT, tenant).used

    def wait_in_flight(self, expected: int, timeout: float) -> float:
        """Seconds until the store holds ``expected`` live leases (fails after ``timeout``)."""
        started = time.monotonic()
        while self.in_flight() != expected:
            assert time.monotonic() - started < timeout, f"{self.in_flight()} leases in flight"
            time.sleep(0.05)  # a real server on real time: nothing to inject
        return time.monotonic() - started


@pytest.fixture(params=DEPLOYMENTS, ids=[d.name for d in DEPLOYMENTS])
def deployment(request: pytest.FixtureRequest) -> Deployment:
    return request.param  # type: ignore[no-any-return]


@pytest.fixture
def overlap_server() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.close()


@pytest.fixture
def stack(
    deployment: Deployment, overlap_server: RedisServer, tmp_path: Path
) -> Iterator[Callable[..., Stack]]:
    built: list[Stack] = []

    def start(store_url: str, *, limit: int = 5, lease_seconds: int = 30) -> Stack:
        env = {
            "SENTINEL_REDIS_URL": store_url,
            "OVERLAP_REDIS_URL": overlap_server.url,
            "CONCURRENCY_LIMIT": str(limit),
            "LEASE_SECONDS": str(lease_seconds),
        }
        server = Server(deployment, env, tmp_path / f"server-{len(built)}.log")
        config = {**concurrency_app.CONFIG, "redis_url": store_url}
        config["policies"] = {
            concurrency_app.ENDPOINT: {
                **concurrency_app.CONFIG["policies"][concurrency_app.ENDPOINT],  # type: ignore[index]
                "limit": limit,
                "lease_seconds": lease_seconds,
            }
        }
        reader = Sentinel(config, registry=CollectorRegistry(), entry_points=False)
        built.append(Stack(server, overlap_server.client(), reader))
        return built[-1]

    yield start
    for item in built:
        item.server.close()
        item.sentinel.close()
        item.overlap.close()


async def fire(url: str, path: str, count: int, timeout: float = 60) -> Counter[int | str]:
    """``count`` requests at once, each on its own connection; their statuses."""
    limits = httpx.Limits(max_connections=count, max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=url, timeout=timeout, limits=limits, headers=AUTH
    ) as client:

        async def one() -> int | str:
            try:
                return (await client.get(path)).status_code
            except httpx.TransportError as exc:
                return type(exc).__name__

        return Counter(await asyncio.gather(*(one() for _ in range(count))))


@pytest.mark.parametrize("store", ["single", "cluster"])
def test_exactly_limit_handlers_run_at_once_under_200_concurrent_slow_requests(
    stack: Callable[..., Stack],
    redis_server: RedisServer,
    store: str,
    request: pytest.FixtureRequest,
) -> None:
    if store == "cluster":
        cluster: RedisCluster = request.getfixturevalue("redis_cluster")
        for node in cluster.primaries():
            node.client().flushall()
        url = cluster.url
    else:
        redis_server.client().flushall()
        url = redis_server.url
    running = stack(url, limit=5)
    # Which worker accepts a connection is the kernel's choice: an asyncio worker may
    # take a whole burst. The limit must hold across processes, so the bursts go on
    # until at least two workers have served (rarely more than one burst).
    for _ in range(5):
        statuses = asyncio.run(fire(running.server.url, "/slow?ms=1500", 200))
        assert set(statuses) <= {200, 429}, (statuses, failures(running.server.log()))
        assert statuses[200] >= 5
        assert int(running.overlap.get("most") or 0) == 5  # never more, and the limit was used
        if len(set(running.overlap.lrange("pids", 0, -1))) >= 2:
            break
    assert len(set(running.overlap.lrange("pids", 0, -1))) >= 2  # several workers served
    assert int(running.overlap.get("running") or 0) == 0
    assert running.in_flight() == 0  # every lease came back


def test_leases_come_back_after_exceptions_and_streams(
    stack: Callable[..., Stack], redis_url: str
) -> None:
    running = stack(redis_url, limit=5)
    statuses = asyncio.run(fire(running.server.url, "/boom", 20))
    assert statuses[500] >= 5
    assert set(statuses) <= {500, 429}
    assert running.in_flight() == 0

    with httpx.stream(
        "GET", f"{running.server.url}/stream?chunks=3&ms=300", timeout=10, headers=AUTH
    ) as body:
        lines = body.iter_lines()
        assert next(lines) == "chunk"
        assert running.in_flight() == 1  # held while the body is being sent
        assert list(lines) == ["chunk", "chunk"]
    running.wait_in_flight(0, timeout=2)

    # a client that goes away in the middle of a streamed body
    with httpx.stream(
        "GET", f"{running.server.url}/stream?chunks=50&ms=100", timeout=10, headers=AUTH
    ) as body:
        lines = body.iter_lines()  # kept: dropping the iterator would close the stream
        assert next(lines) == "chunk"
        assert running.in_flight() == 1
    waited = running.wait_in_flight(0, timeout=10)  # lease_seconds is 30: not an expiry
    assert waited < 10


def test_a_client_that_disconnects_cancels_the_handler_and_frees_the_lease(
    stack: Callable[..., Stack], redis_url: str, deployment: Deployment
) -> None:
    if not deployment.cancels_on_disconnect:
        # Only the streamed-body disconnect above is noticed there: a sync WSGI handler
        # cannot be interrupted, and Starlette cancels streaming responses only.
        return
    running = stack(redis_url, limit=5)
    statuses = asyncio.run(fire(running.server.url, "/slow?ms=30000", 5, timeout=1.0))
    assert statuses == Counter({"ReadTimeout": 5})
    waited = running.wait_in_flight(0, timeout=5)  # handlers cancelled, leases handed back
    assert waited < 5
    assert int(running.overlap.get("running") or 0) == 0


def test_a_worker_killed_mid_request_frees_its_lease_after_lease_seconds(
    stack: Callable[..., Stack], redis_url: str
) -> None:
    running = stack(redis_url, limit=1, lease_seconds=3)
    pool = httpx.Client(timeout=30, headers=AUTH)
    with contextlib.ExitStack() as cleanup:
        cleanup.callback(pool.close)
        import threading

        outcome: list[object] = []
        caller = threading.Thread(
            target=lambda: outcome.append(_get(pool, f"{running.server.url}/slow?ms=20000"))
        )
        caller.start()
        cleanup.callback(caller.join)
        deadline = time.monotonic() + 10
        while not running.overlap.llen("pids"):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        worker = int(running.overlap.lindex("pids", 0))  # type: ignore[arg-type]
        os.kill(worker, signal.SIGKILL)
        killed = time.monotonic()
        assert running.in_flight() == 1  # the dead worker's lease is still held...
        assert httpx.get(f"{running.server.url}/slow?ms=0", headers=AUTH).status_code == 429
        running.wait_in_flight(0, timeout=10)
        freed_after = time.monotonic() - killed
        assert 1.5 <= freed_after <= 10  # ... until lease_seconds after it was taken
        assert (
            httpx.get(f"{running.server.url}/slow?ms=0", timeout=10, headers=AUTH).status_code
            == 200
        )


def failures(log: str) -> str:
    return "\n".join(line for line in log.splitlines() if "rate_limited" not in line)


def _get(client: httpx.Client, url: str) -> object:
    try:
        return client.get(url).status_code
    except httpx.TransportError as exc:
        return exc
