"""Real Redis Cluster and Redis Sentinel deployments owned by the tests.

Built from the same `redis-server` binary as `RedisServer`, on free loopback ports,
stopped by pid: a 3-primary + 3-replica cluster created with
``redis-cli --cluster create``, and a primary/replica pair watched by three Sentinels.
Timeouts are short (``cluster-node-timeout``, ``down-after-milliseconds``) so failover
tests finish in seconds.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from sentinel_core import DecisionReason

NODE_TIMEOUT_MS = 1000
FAILURE_REASONS = {
    DecisionReason.FAIL_CLOSED,
    DecisionReason.CIRCUIT_OPEN,
    DecisionReason.REDIS_CONNECTION_ERROR,
    DecisionReason.REDIS_TIMEOUT,
}
"""What a fail-closed decision may say while a node of the cluster is down or failing over."""


class _Process:
    """One redis-server (or redis-server --sentinel) child, restartable on its port."""

    def __init__(self, args: list[str], port: int, workdir: Path) -> None:
        self.port = port
        self._args = args
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None
        self._client: redis.Redis | None = None

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server must be on PATH"
        self._process = subprocess.Popen(
            [binary, *self._args],
            cwd=self._workdir,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        _wait(self._answers_ping, f"port {self.port} answers PING")

    def _answers_ping(self) -> bool:
        assert self._process is not None
        if self._process.poll() is not None:
            raise RuntimeError(
                f"redis-server on port {self.port} exited with {self._process.returncode}"
            )
        return bool(self.client().ping())

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def client(self) -> redis.Redis:
        """This process's admin client (one per process, closed by `stop`)."""
        if self._client is None:
            self._client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2)
        return self._client


def _wait(condition: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if condition():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting until {what}")
        time.sleep(0.05)


_handed_out: set[int] = set()
"""Ports given to servers of this run: free now, but maybe not yet bound."""


def cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too.

    Both stay below Linux's ephemeral range (32768 and up), so a client socket opened
    by another test between this check and the server's bind cannot take them.
    """
    for _ in range(1000):
        port = random.randint(20000, 22767)
        if port in _handed_out:
            continue
        try:
            for candidate in (port, port + 10000):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError("no free port pair for a cluster node")


def _server_args(port: int, *extra: str) -> list[str]:
    return [
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--maxmemory",
        "64mb",
        "--maxmemory-policy",
        "noeviction",
        "--loglevel",
        "warning",
        "--logfile",
        f"redis-{port}.log",
        *extra,
    ]


class RedisCluster:
    """Three primaries and three replicas on loopback."""

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sentinel-cluster-"))
        self.nodes: list[_Process] = []
        for _ in range(6):
            port = cluster_port()
            workdir = self._dir / str(port)
            workdir.mkdir()
            args = _server_args(
                port,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                str(NODE_TIMEOUT_MS),
            )
            self.nodes.append(_Process(args, port, workdir))

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{node.port}" for node in self.nodes[:3])
        return f"redis+cluster://{hosts}"

    def start(self) -> RedisCluster:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "1",
                "--cluster-yes",
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        self.wait_healthy()
        return self

    def wait_healthy(self) -> None:
        """Until every live node reports ``cluster_state:ok``, three primaries serve, and
        every replica has completed its sync (one that never synced cannot take over)."""

        def healthy() -> bool:
            for node in self.live_nodes():
                info = node.client().execute_command("CLUSTER", "INFO")
                text = info.decode() if isinstance(info, bytes) else str(info)
                if "cluster_state:ok" not in text:
                    return False
                replication = node.client().info("replication")
                if replication["role"] == "slave" and replication["master_link_status"] != "up":
                    return False
            return len(self.primaries()) == 3

        _wait(healthy, "the cluster is healthy")

    def live_nodes(self) -> list[_Process]:
        return [node for node in self.nodes if node._process is not None]

    def primaries(self) -> list[_Process]:
        found = []
        for node in self.live_nodes():
            role = node.client().execute_command("ROLE")[0]
            if role in (b"master", "master"):
                found.append(node)
        return found

    def node_for_key(self, key: str) -> _Process:
        """The live primary that owns ``key``'s slot."""
        slot = self.live_nodes()[0].client().execute_command("CLUSTER", "KEYSLOT", key)
        for node in self.primaries():
            for start, end, *_ in node.client().execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end and _ and _[0][1] == node.port:
                    return node
        raise LookupError(f"no live primary serves slot {slot}")

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self._dir, ignore_errors=True)


class SentinelDeployment:
    """A primary, one replica and three Sentinels (quorum 2) watching service ``main``."""

    SERVICE = "main"

    def __init__(self) -> None:
        self._dir = Path(tempfile.mkdtemp(prefix="sentinel-managed-"))
        primary_port, replica_port = cluster_port(), cluster_port()
        self.primary = _Process(_server_args(primary_port), primary_port, self._dir)
        self.replica = _Process(
            _server_args(replica_port, "--replicaof", "127.0.0.1", str(primary_port)),
            replica_port,
            self._dir,
        )
        self.sentinels: list[_Process] = []
        for _ in range(3):
            port = cluster_port()
            conf = self._dir / f"sentinel-{port}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {primary_port} 2\n"
                f"sentinel down-after-milliseconds {self.SERVICE} {NODE_TIMEOUT_MS}\n"
                f"sentinel failover-timeout {self.SERVICE} 5000\n"
                f"sentinel parallel-syncs {self.SERVICE} 1\n"
            )
            self.sentinels.append(_Process([str(conf), "--sentinel"], port, self._dir))

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.SERVICE}/0"

    def start(self) -> SentinelDeployment:
        self.primary.start()
        self.replica.start()
        _wait(
            lambda: self.replica.client().info("replication")["master_link_status"] == "up",
            "the replica syncs",
        )
        for sentinel in self.sentinels:
            sentinel.start()
        _wait(
            lambda: self.current_primary_port() == self.primary.port,
            "the Sentinels agree on the primary",
        )
        return self

    def current_primary_port(self) -> int:
        client = self.sentinels[0].client()
        _, port = client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.SERVICE)
        return int(port)

    def close(self) -> None:
        for process in [*self.sentinels, self.replica, self.primary]:
            process.stop()
        shutil.rmtree(self._dir, ignore_errors=True)
