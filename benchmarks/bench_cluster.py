"""Redis Cluster beside a single Redis, and what a failover costs in admissions.

1. Decision latency (sync `evaluate`), sequential, interleaved rounds: a tenant bucket
   and the anonymous AND (two buckets, one script call) on a single private
   redis-server and on a private 3+3 cluster.
2. Throughput with 8 threads on each.
3. Failover under load, on the cluster and on a Sentinel-managed pair: 8 threads
   hammer one hot fail-closed bucket (burst 10^6, no refill); its primary is killed;
   load goes on until decisions are answered by the promoted replica again. Then one
   more decision reads how many admissions Redis recorded. Admissions the clients saw
   minus admissions Redis remembers = writes lost to asynchronous replication = the
   over-admission a failover can cause.

Run: ``python -m benchmarks.bench_cluster [--quick] [--plot docs/img/cluster-latency.png]``
(or ``python benchmarks/bench_cluster.py ...``)
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import machine_note, markdown_table, private_redis, run_rounds
from benchmarks._plots import latency_bars_png
from sentinel_core import AnonymousIdentity, DecisionReason, Sentinel, TenantIdentity
from tests.support.redis_cluster import RedisCluster, SentinelDeployment

POLICY = {"algorithm": "token_bucket", "rate": "1000/second", "burst": 1000, "fail_mode": "closed"}
HOT = {"algorithm": "token_bucket", "rate": "1/hour", "burst": 1_000_000, "fail_mode": "closed"}


def _sentinel(url: str, timeout_ms: int = 1000) -> Sentinel:
    config: dict[str, Any] = {
        "redis_url": url,
        "socket_timeout_ms": timeout_ms,
        "breaker": {"failure_threshold": 3, "open_seconds": 1},
        "policies": {"api": POLICY, "hot": HOT},
    }
    sentinel = Sentinel(config, entry_points=False)
    sentinel.check()
    return sentinel


def latency(single: Sentinel, cluster: Sentinel, rounds: int, plot: Path | None) -> str:
    counter = iter(range(10**9))
    anon = AnonymousIdentity("device-1", "ipv4:192.0.2.1", b"k" * 32)

    def tenant(sentinel: Sentinel) -> Any:
        return lambda: sentinel.evaluate("api", f"t{next(counter) % 5000}")

    results = run_rounds(
        {
            "single: tenant": tenant(single),
            "cluster: tenant": tenant(cluster),
            "single: anonymous AND": lambda: single.evaluate("api", anon),
            "cluster: anonymous AND": lambda: cluster.evaluate("api", anon),
        },
        rounds=rounds,
        per_round=200,
    )
    rows = [[s.name, s.p50_us, s.p99_us, s.per_second] for s in results.values()]
    if plot is not None:
        bars = [(s.name.replace(": ", "\n"), s.p50_us, s.p99_us) for s in results.values()]
        latency_bars_png(plot, bars, title="Decision latency: single Redis vs 3+3 cluster")
    ratio = results["cluster: tenant"].p50_us / results["single: tenant"].p50_us
    anon_ratio = results["cluster: anonymous AND"].p50_us / results["cluster: tenant"].p50_us
    return (
        markdown_table(["decision", "p50 µs", "p99 µs", "sequential /s"], rows)
        + f"\n\ncluster/single p50: {ratio:.2f}; "
        + f"anonymous AND / tenant on the cluster: {anon_ratio:.2f}"
    )


def throughput(sentinel: Sentinel, seconds: float, threads: int = 8) -> float:
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def worker(index: int) -> None:
        while time.monotonic() < stop:
            sentinel.evaluate("api", f"w{index}-{counts[index] % 1000}")
            counts[index] += 1

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts) / seconds


def failover(url: str, kill: Any, threads: int = 8) -> dict[str, Any]:
    sentinel = _sentinel(url, timeout_ms=200)
    reasons: Counter[DecisionReason] = Counter()
    lock = threading.Lock()
    state = {"killed_at": 0.0, "failed_at": 0.0, "recovered_at": 0.0}
    done = threading.Event()

    def worker() -> None:
        while not done.is_set():
            started = time.monotonic()
            decision = sentinel.evaluate("hot", "tenant-hot")
            with lock:
                reasons[decision.reason] += 1
                if state["killed_at"] and not decision.allowed and not state["failed_at"]:
                    state["failed_at"] = time.monotonic()
                # recovered: an admission by a call that began after the first failure
                # (a call in flight at the kill may still be answered by the old primary)
                failed_at = state["failed_at"]
                if (
                    failed_at
                    and started > failed_at
                    and decision.allowed
                    and not state["recovered_at"]
                ):
                    state["recovered_at"] = time.monotonic()
            if not decision.allowed:
                time.sleep(0.005)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    time.sleep(1.0)
    with lock:
        state["killed_at"] = time.monotonic()
    kill()
    deadline = time.monotonic() + 60
    while not state["recovered_at"] and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)
    done.set()
    for thread in pool:
        thread.join()
    final = sentinel.evaluate("hot", "tenant-hot")
    while not final.allowed:  # the breaker may still be in its quarantine
        time.sleep(0.1)
        final = sentinel.evaluate("hot", "tenant-hot")
    admitted = reasons[DecisionReason.ALLOWED] + 1
    recorded = HOT["burst"] - final.remaining
    sentinel.close()
    return {
        "admitted": admitted,
        "recorded": recorded,
        "lost": admitted - recorded,
        "outage_s": state["recovered_at"] - state["killed_at"],
        "reasons": dict(reasons),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--plot", type=Path, help="also draw the latency bars into this PNG")
    args = parser.parse_args()
    rounds = 5 if args.quick else 20
    print(f"# Cluster benchmark\n\n{machine_note()}\n")
    with private_redis() as server:
        cluster_deployment = RedisCluster().start()
        try:
            single, cluster = _sentinel(server.url), _sentinel(cluster_deployment.url)
            print("## Decision latency (sync evaluate, sequential)\n")
            print(latency(single, cluster, rounds, args.plot) + "\n")
            seconds = 2.0 if args.quick else 5.0
            print("## Throughput, 8 threads\n")
            rows = [
                ["single", throughput(single, seconds)],
                ["cluster", throughput(cluster, seconds)],
            ]
            print(markdown_table(["store", "decisions/s"], rows) + "\n")
            single.close()
            cluster.close()
            key = TenantIdentity("tenant-hot").bucket_keys(cluster.policy("hot"))[0]
            victim = cluster_deployment.node_for_key(key)
            cluster_result = failover(cluster_deployment.url, victim.stop)
        finally:
            cluster_deployment.close()
    sentinel_deployment = SentinelDeployment().start()
    try:
        sentinel_result = failover(sentinel_deployment.url, sentinel_deployment.primary.stop)
    finally:
        sentinel_deployment.close()
    print("## Failover under load (8 threads, one hot fail-closed bucket)\n")
    rows = [
        [
            name,
            r["outage_s"],
            r["admitted"],
            r["recorded"],
            r["lost"],
            ", ".join(f"{k.value}={v}" for k, v in sorted(r["reasons"].items())),
        ]
        for name, r in (("cluster", cluster_result), ("sentinel", sentinel_result))
    ]
    print(
        markdown_table(
            [
                "deployment",
                "outage s",
                "admitted",
                "recorded by Redis",
                "lost (over-admission)",
                "reasons",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
