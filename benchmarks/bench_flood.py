"""A flood of denied requests: what one identity far over its limit costs, Sentinel
beside Flask-Limiter, slowapi and django-ratelimit, through real servers.

Each contender is a real server with 4 worker processes on loopback (gunicorn -w 4
for Flask and Django, uvicorn --workers 4 for FastAPI), on a fresh redis-server of its
own, with one limit of ``10/minute`` for one identity (Sentinel: a JWT tenant; the
peers: their documented key, the client address). All servers run at once and are
measured in interleaved rounds (A, B, C, ..., then B, C, ..., A), so load from elsewhere
on the machine spreads over all of them. ``wrk`` floods ``/limited`` with 16
connections, ``--seconds`` per contender (30 by default) in rounds of ``--chunk``
seconds, nearly every request denied. Measured:

* **Redis commands per denied request**: every command Redis ran (``INFO
  commandstats``, those run inside scripts included, the benchmark's own INFO/CONFIG
  excluded) over the denials;
* **CPU seconds per 1,000 denials**: user + system time of the server's processes
  (master and workers, from ``/proc``) during its flood rounds, per 1,000 denials;
* **log lines per second** of flood, written by the workers with INFO logging on (each
  library's own records: Flask-Limiter and slowapi log every breach at INFO, Sentinel
  at most one WARNING per endpoint, identity and reason per second and process; each
  flood round starts a fresh second, so 3 rounds of 10 s allow 11 lines per worker);
* **p50 of a denied response** and the **in-stack floor**: after the flood, one
  connection sends sequential requests, ``--rounds`` interleaved rounds, to ``/bare``
  (same handler, no limiter), ``/evalsha`` (the handler running one bare ``EVALSHA``),
  ``/refused`` (the handler answering 429 itself) and ``/limited`` (denied). The
  denial's *added* p50 is ``limited - bare``, and over an unguarded 429
  ``limited - refused`` (what the limiter adds to a refusal the framework would make
  anyway); the floor is ``evalsha - bare``, one Redis round trip inside that stack;
* the same four routes of the Flask and Django apps called in one warm process, no
  server (`warm_wsgi`), and the core's own local denial (`in_process`): what the same
  code costs when no other process runs between two requests.

Run from the repository root (``wrk`` on PATH: ``apt-get install wrk``)::

    python -m benchmarks.bench_flood               # ~7 minutes
    python -m benchmarks.bench_flood --seconds 5   # a quick run
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import IO

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis

from benchmarks._common import machine_note, markdown_table, private_redis, run_rounds
from benchmarks._flood_apps import sentinel_config, token
from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
WORKERS = 4
CONNECTIONS = 16
ADMIN_COMMANDS = {"info", "config|resetstat", "config", "ping", "command", "command|docs"}


@dataclass(frozen=True)
class Contender:
    name: str
    framework: str
    kind: str
    """``FLOOD_KIND`` for `_flood_apps`."""
    logger: str
    """The limiter's own logger (its records are counted apart from the framework's)."""


CONTENDERS = (
    Contender("Sentinel (Flask)", "flask", "sentinel", "sentinel"),
    Contender("Flask-Limiter", "flask", "flask-limiter", "flask-limiter"),
    Contender("Sentinel (FastAPI)", "fastapi", "sentinel", "sentinel"),
    Contender("slowapi", "fastapi", "slowapi", "slowapi"),
    Contender("Sentinel (Django)", "django", "sentinel", "sentinel"),
    Contender("django-ratelimit", "django", "django-ratelimit", "django_ratelimit"),
)
WITHOUT_OBSERVERS = Contender(
    "Sentinel (Flask), built-in observers off", "flask", "sentinel-unobserved", "sentinel"
)
"""With ``--without-observers``: what the built-in metrics and denial log (SPEC §6-§7,
run on every decision) cost a local denial, through the same server."""


@dataclass
class Result:
    contender: Contender
    seconds: float
    requests: int
    denied: int
    commands: int
    cpu_seconds: float
    log_lines: int
    """Written by the limiter's own logger."""
    all_log_lines: int
    """Everything the workers logged (Django, for one, logs every 4xx at WARNING)."""
    flood_p50_us: float
    bare_p50_us: float
    evalsha_p50_us: float
    refused_p50_us: float
    limited_p50_us: float

    @property
    def commands_per_denial(self) -> float:
        return self.commands / self.denied

    @property
    def cpu_per_1000(self) -> float:
        return self.cpu_seconds / self.denied * 1_000

    @property
    def added_us(self) -> float:
        return self.limited_p50_us - self.bare_p50_us

    @property
    def added_to_refusal_us(self) -> float:
        return self.limited_p50_us - self.refused_p50_us

    @property
    def floor_us(self) -> float:
        return self.evalsha_p50_us - self.bare_p50_us


def server_command(contender: Contender, port: int) -> list[str]:
    bind = f"127.0.0.1:{port}"
    bin_dir = Path(sys.executable).parent
    if contender.framework == "fastapi":
        return [
            str(bin_dir / "uvicorn"),
            "--factory",
            "benchmarks._flood_apps:fastapi_app",
            "--workers",
            str(WORKERS),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--no-access-log",
            "--log-level",
            "warning",
        ]
    factory = "flask_app" if contender.framework == "flask" else "django_app"
    return [
        str(bin_dir / "gunicorn"),
        "-w",
        str(WORKERS),
        "-b",
        bind,
        "--log-level",
        "warning",
        f"benchmarks._flood_apps:{factory}()",
    ]


def denial_status(port: int) -> int:
    """The status of one request to /limited (the identity is over its limit by now)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(
            b"GET /limited HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            + f"Authorization: Bearer {token()}\r\n\r\n".encode()
        )
        return int(conn.recv(64).split()[1])


def wait_until_serving(port: int, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
                conn.sendall(b"GET /bare HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                if conn.recv(64).startswith(b"HTTP/1.1 200"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"no server on port {port} after {deadline_s}s")


def process_tree(root: int) -> list[int]:
    """``root`` and every descendant, from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, frontier = [root], [root]
    while frontier:
        children = [pid for pid, parent in parents.items() if parent in frontier]
        tree += children
        frontier = children
    return tree


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU of ``pids`` (those still alive), from /proc/<pid>/stat."""
    ticks = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def commands_run(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(
        int(value["calls"])
        for name, value in stats.items()
        if name.removeprefix("cmdstat_") not in ADMIN_COMMANDS
    )


_UNITS = {"us": 1.0, "ms": 1_000.0, "s": 1_000_000.0}


def wrk(url: str, seconds: float, connections: int, threads: int) -> tuple[int, int, float]:
    """Run wrk; (requests, non-2xx responses, p50 in µs)."""
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-H",
            f"Authorization: Bearer {token()}",
            url,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    ).stdout
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", out)
    assert p50 is not None, out
    return (
        requests,
        int(non_2xx.group(1)) if non_2xx else 0,
        float(p50.group(1)) * _UNITS[p50.group(2)],
    )


class Running:
    """One contender's server (4 workers) on its own redis-server, and its tallies."""

    def __init__(self, contender: Contender, stack: ExitStack) -> None:
        self.contender = contender
        self.server = stack.enter_context(private_redis())
        self.client = self.server.client()
        stack.callback(self.client.close)
        self.log = stack.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115 - the stack closes it
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "FLOOD_KIND": contender.kind, "FLOOD_REDIS": self.server.url}
        self.process = subprocess.Popen(
            server_command(contender, self.port),
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
            start_new_session=True,
        )
        stack.callback(self.stop)
        self.pids: list[int] = []
        self.seconds = self.cpu = 0.0
        self.requests = self.denied = 0
        self.flood_p50s: list[float] = []
        self.p50s: dict[str, list[float]] = {
            "bare": [],
            "evalsha": [],
            "refused": [],
            "limited": [],
        }
        self._seen = 0
        self.lines: list[str] = []

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=30)

    def ready(self) -> None:
        """Serving, every worker warm, the identity over its limit; counters zeroed."""
        wait_until_serving(self.port)
        wrk(f"{self.base}/limited", 1, CONNECTIONS, 2)
        status = denial_status(self.port)
        if status not in (429, 403):  # django-ratelimit answers 403 by default
            raise RuntimeError(f"{self.contender.name}: /limited answered {status}")
        self.pids = process_tree(self.process.pid)
        self.log.flush()
        self._seen = len(_lines(self.log))
        self.client.config_resetstat()

    def flood(self, seconds: float) -> None:
        cpu = cpu_seconds(self.pids)
        started = time.monotonic()
        requests, denied, p50 = wrk(f"{self.base}/limited", seconds, CONNECTIONS, 2)
        self.seconds += time.monotonic() - started
        self.cpu += cpu_seconds(self.pids) - cpu
        self.requests += requests
        self.denied += denied
        self.flood_p50s.append(p50)

    def end_flood(self) -> None:
        self.commands = commands_run(self.client)
        self.log.flush()
        self.lines = _lines(self.log)[self._seen :]

    def probe(self, seconds: float) -> None:
        for route, p50s in self.p50s.items():
            p50s.append(wrk(f"{self.base}/{route}", seconds, 1, 1)[2])

    def result(self) -> Result:
        ours = sum(1 for line in self.lines if line.split(" ", 1)[0] == self.contender.logger)
        bare, evalsha, refused, limited = (statistics.median(self.p50s[r]) for r in self.p50s)
        return Result(
            self.contender,
            self.seconds,
            self.requests,
            self.denied,
            self.commands,
            self.cpu,
            ours,
            len(self.lines),
            statistics.median(self.flood_p50s),
            bare,
            evalsha,
            refused,
            limited,
        )


def measure(
    contenders: list[Contender], seconds: float, chunk: float, probe_seconds: float, rounds: int
) -> list[Result]:
    """All servers up at once; the flood and the probes in rounds, contenders interleaved
    (A, B, C, ..., then B, C, ..., A), so load from elsewhere spreads over all of them."""
    with ExitStack() as stack:
        running = [Running(contender, stack) for contender in contenders]
        for server in running:
            server.ready()
        chunks = max(1, round(seconds / chunk))
        for index in range(chunks):
            for server in _rotated(running, index):
                server.flood(seconds / chunks)
            print(f"  flood round {index + 1}/{chunks}", file=sys.stderr)
        time.sleep(0.2)
        for server in running:
            server.end_flood()
        for index in range(rounds):
            for server in _rotated(running, index):
                server.probe(probe_seconds)
        return [server.result() for server in running]


def _rotated(items: list[Running], shift: int) -> list[Running]:
    shift %= len(items)
    return items[shift:] + items[:shift]


def in_process(rounds: int = 10, per_round: int = 500) -> str:
    """Without a server: `Sentinel.evaluate` answering a flooded bucket locally, and
    `Sentinel.guard` doing so for an HTTP request (token, decision, 429 outcome), beside
    one bare `EVALSHA`, interleaved rounds on one private redis-server."""
    from prometheus_client import CollectorRegistry

    from sentinel_core import RequestView, Sentinel

    with private_redis() as server:
        os.environ["FLOOD_REDIS"] = server.url
        sentinel = Sentinel(sentinel_config(), registry=CollectorRegistry(), entry_points=False)
        logging.getLogger("sentinel").addHandler(logging.NullHandler())
        logging.getLogger("sentinel").propagate = False
        client = server.client()
        sha = client.script_load("return 1")
        request = RequestView(
            method="GET",
            route="/limited",
            headers={"authorization": f"Bearer {token()}"},  # lower case, as frameworks fold
            cookies={},
            peer="127.0.0.1",
        )
        while sentinel.evaluate("flood", "flooder").allowed:
            pass
        if not sentinel.evaluate("flood", "flooder").local:
            raise RuntimeError("the flooded bucket is not answered locally")
        if sentinel.guard("flood", request).status != 429:
            raise RuntimeError("the HTTP request is not denied")
        stats = run_rounds(
            {
                "bare EVALSHA (floor)": lambda: client.evalsha(sha, 0),
                "evaluate, denied locally": lambda: sentinel.evaluate("flood", "flooder"),
                "guard (HTTP), denied locally": lambda: sentinel.guard("flood", request),
            },
            rounds=rounds,
            per_round=per_round,
        )
        sentinel.close()
        client.close()
    floor = stats["bare EVALSHA (floor)"].p50_us
    return markdown_table(
        ("in process", "p50 µs", "p99 µs", "p50 / floor p50"),
        [
            (s.name, f"{s.p50_us:.1f}", f"{s.p99_us:.1f}", f"{s.p50_us / floor:.2f}")
            for s in stats.values()
        ],
    )


WSGI_ROUTES = ("bare", "evalsha", "refused", "limited")


def warm_wsgi(framework: str, rounds: int = 10, per_round: int = 300) -> dict[str, float]:
    """The gunicorn apps' routes called in one warm process, no server: the p50 µs of
    each WSGI call (Sentinel's app, a private redis-server, the flooded bucket already
    answered locally). Run once per process: Django configures its settings only once."""
    import io
    from wsgiref.util import setup_testing_defaults

    from benchmarks import _flood_apps

    with private_redis() as server:
        os.environ["FLOOD_REDIS"] = server.url
        os.environ["FLOOD_KIND"] = "sentinel"
        app = _flood_apps.flask_app() if framework == "flask" else _flood_apps.django_app()
        authorization = f"Bearer {token()}"
        statuses: dict[str, str] = {}
        """The last status line of each path."""

        def call(path: str) -> Callable[[], bytes]:
            environ: dict[str, object] = {
                "PATH_INFO": path,
                "REMOTE_ADDR": "127.0.0.1",
                "HTTP_AUTHORIZATION": authorization,
            }
            setup_testing_defaults(environ)

            def start_response(status: str, headers: object, exc_info: object = None) -> None:
                statuses[path] = status

            def request() -> bytes:
                body = app({**environ, "wsgi.input": io.BytesIO()}, start_response)
                try:
                    return b"".join(body)
                finally:
                    getattr(body, "close", lambda: None)()

            return request

        calls = {route: call(f"/{route}") for route in WSGI_ROUTES}
        for _ in range(20):  # flood the bucket until it is answered locally
            calls["limited"]()
        stats = run_rounds(calls, rounds=rounds, per_round=per_round)
        if not statuses["/limited"].startswith("429"):
            raise RuntimeError(f"{framework}: /limited was not denied: {statuses['/limited']}")
    return {route: stats[route].p50_us for route in WSGI_ROUTES}


def warm_table() -> str:
    """`warm_wsgi` for Flask and Django, each in a fresh interpreter."""
    rows = []
    for framework in ("flask", "django"):
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.bench_flood", "--warm-wsgi", framework],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout
        p50 = json.loads(out.strip().splitlines()[-1])
        floor = p50["evalsha"] - p50["bare"]
        added = p50["limited"] - p50["bare"]
        over_refusal = p50["limited"] - p50["refused"]
        rows.append(
            (
                f"Sentinel ({framework.capitalize()}), WSGI app in a warm process",
                *(f"{p50[route]:.1f}" for route in WSGI_ROUTES),
                f"{floor:.1f}",
                f"{added:.1f}",
                f"{added / floor:.2f}",
                f"{over_refusal / floor:.2f}",
            )
        )
    return markdown_table(
        (
            "no server",
            "bare p50 µs",
            "bare + EVALSHA p50 µs",
            "unguarded 429 p50 µs",
            "denied p50 µs",
            "floor µs",
            "denial adds µs",
            "added / floor",
            "added to a 429 / floor",
        ),
        rows,
    )


def _lines(log: IO[str]) -> list[str]:
    log.seek(0)
    return log.readlines()


def report(results: list[Result]) -> str:
    rows = [
        (
            r.contender.name,
            f"{r.denied:,}",
            f"{r.denied / r.seconds:,.0f}",
            f"{r.commands_per_denial:.4f}",
            f"{r.commands / r.seconds:,.1f}",
            f"{r.cpu_per_1000:.2f}",
            f"{r.log_lines / r.seconds:,.1f}",
            f"{r.log_lines / r.seconds / WORKERS:,.2f}",
            f"{r.all_log_lines / r.seconds:,.1f}",
            f"{r.flood_p50_us / 1000:.2f}",
        )
        for r in results
    ]
    flood = markdown_table(
        (
            "contender",
            "denied",
            "denied/s",
            "Redis commands per denial",
            "Redis commands/s",
            "CPU s per 1,000 denials",
            "limiter log lines/s",
            "per worker",
            "all log lines/s",
            "p50 under flood, ms",
        ),
        rows,
    )
    latency = markdown_table(
        (
            "contender",
            "bare p50 µs",
            "bare + EVALSHA p50 µs",
            "denied p50 µs",
            "floor (EVALSHA - bare) µs",
            "denial adds (denied - bare) µs",
            "added / floor",
            "unguarded 429 p50 µs",
            "adds to a 429 (denied - unguarded 429) µs",
            "added to a 429 / floor",
        ),
        [
            (
                r.contender.name,
                f"{r.bare_p50_us:.0f}",
                f"{r.evalsha_p50_us:.0f}",
                f"{r.limited_p50_us:.0f}",
                f"{r.floor_us:.0f}",
                f"{r.added_us:.0f}",
                f"{r.added_us / r.floor_us:.2f}" if r.floor_us > 0 else "n/a",
                f"{r.refused_p50_us:.0f}",
                f"{r.added_to_refusal_us:.0f}",
                f"{r.added_to_refusal_us / r.floor_us:.2f}" if r.floor_us > 0 else "n/a",
            )
            for r in results
        ],
    )
    return f"{flood}\n\n{latency}"


def plot(results: list[Result], path: Path) -> None:
    from benchmarks._plots import bars_png

    bars_png(
        path,
        [r.contender.name for r in results],
        [
            ("Redis commands per denied request", [r.commands_per_denial for r in results]),
            ("worker CPU ms per denied request", [r.cpu_per_1000 for r in results]),
            (
                "log lines per second (4 workers, everything logged)",
                [r.all_log_lines / r.seconds for r in results],
            ),
        ],
        title="One identity flooding 4 workers: cost per denied request (log scales)",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30, help="flood duration per contender")
    parser.add_argument("--chunk", type=float, default=10, help="seconds per flood round")
    parser.add_argument("--probe-seconds", type=float, default=2, help="each latency probe")
    parser.add_argument("--rounds", type=int, default=5, help="latency probe rounds")
    parser.add_argument("--only", action="append", help="contender names to run (substring)")
    parser.add_argument("--plot", type=Path, help="write the comparison as a PNG here")
    parser.add_argument("--in-process-only", action="store_true", help="only the serverless tables")
    parser.add_argument(
        "--without-observers",
        action="store_true",
        help="also Sentinel (Flask) with its built-in metrics and log unregistered",
    )
    parser.add_argument("--warm-wsgi", choices=("flask", "django"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.warm_wsgi:
        print(json.dumps(warm_wsgi(args.warm_wsgi)))
        return 0
    if args.in_process_only:
        print(machine_note())
        print(in_process())
        print()
        print(warm_table())
        return 0
    if shutil.which("wrk") is None:
        print("wrk not found: apt-get install wrk", file=sys.stderr)
        return 2
    contenders = CONTENDERS + ((WITHOUT_OBSERVERS,) if args.without_observers else ())
    chosen = [
        c
        for c in contenders
        if not args.only or any(o.lower() in c.name.lower() for o in args.only)
    ]
    print(machine_note())
    print(
        f"{WORKERS} workers per server, wrk {CONNECTIONS} connections, "
        f"{args.seconds:g} s flood per contender\n"
    )
    results = measure(chosen, args.seconds, args.chunk, args.probe_seconds, args.rounds)
    print(report(results))
    print()
    print(in_process())
    print()
    print(warm_table())
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
