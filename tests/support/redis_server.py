"""Real redis-server processes owned by the tests, on free loopback ports.

Never the shared server on 6379: every server here is started by the test run, with no
persistence, and stopped by pid. A server can be killed and restarted on its port to
inject a real outage.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One redis-server child process.

    Args:
        maxmemory: ``maxmemory`` in bytes (0 means unbounded).
        policy: ``maxmemory-policy``.
    """

    def __init__(self, *, maxmemory: int = 64 * 1024 * 1024, policy: str = "noeviction") -> None:
        self.port = free_port()
        self.maxmemory = maxmemory
        self.policy = policy
        self._dir = Path(tempfile.mkdtemp(prefix="sentinel-redis-"))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        assert binary, "redis-server must be on PATH"
        self._process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self._dir),
                "--maxmemory",
                str(self.maxmemory),
                "--maxmemory-policy",
                self.policy,
                "--loglevel",
                "warning",
                "--logfile",
                str(self._dir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self._wait_for_ping()
        return self

    def stop(self) -> None:
        """Kill the server (SIGKILL: an outage, not a shutdown) and reap it."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def pause(self) -> None:
        """SIGSTOP the server: connections stay open, nothing answers (a hung Redis)."""
        assert self._process is not None
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT a paused server: it answers what was queued meanwhile, then goes on."""
        assert self._process is not None
        self._process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _wait_for_ping(self, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5)
        try:
            while True:
                assert self._process is not None
                if self._process.poll() is not None:
                    raise RuntimeError(f"redis-server on port {self.port} exited at start")
                try:
                    if client.ping():
                        return
                except redis.RedisError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.02)
        finally:
            client.close()
