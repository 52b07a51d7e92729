"""The stores' direct path: a script call sent on a pooled connection, pre-framed.

The frame must be byte-for-byte what redis-py would send, and the direct path must
step aside whenever someone else has a stake in ``execute_command`` (an override on
the instance, a wrapper on the class such as tracing instrumentation, a
single-connection client), so their code keeps seeing every command.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis
import redis.asyncio
from prometheus_client import CollectorRegistry
from redis.connection import PythonRespSerializer

from sentinel_core import Sentinel, TenantIdentity
from sentinel_core.store import _protocol
from sentinel_core.store._protocol import pack_evalsha
from sentinel_core.store._redis import AsyncRedisStore, RedisStore, sends_directly
from tests.conftest import make_config

EP = "direct.tb"


def make_sentinel(url: str, algorithm: str = "token_bucket") -> Sentinel:
    config = make_config(
        url, direct__tb={"algorithm": algorithm, "rate": "100/minute", "fail_mode": "closed"}
    )
    config["socket_timeout_ms"] = 2_000
    config["local_denials_ms"] = 0  # every decision, denials included, goes to Redis
    return Sentinel(config, registry=CollectorRegistry(), entry_points=False)


def redis_py_frame(*command: Any, encoding: str = "utf-8") -> bytes:
    """The frame redis-py's own serializer builds. (With hiredis installed redis-py packs
    with hiredis instead, which encodes every ``str`` as UTF-8 whatever ``encoding``.)"""
    encoder = redis.Connection(encoding=encoding).encoder
    return b"".join(PythonRespSerializer(6_000, encoder.encode).pack(*command))


@pytest.mark.parametrize(
    "command",
    [
        ("EVALSHA", "a" * 40, 1, "sentinel:v1:{abc}:ep:1", 100_000_000, 100, 60, 1_000_000),
        ("EVALSHA", "b" * 40, 2, "k:é:1", "k2", 3, 60_000_000, 1, 30, 120_000_000, 1),
        ("EVALSHA", "c" * 40, 0),
    ],
)
def test_the_frame_is_what_redis_py_would_send(command: tuple[Any, ...]) -> None:
    assert pack_evalsha(command) == redis_py_frame(*command)
    assert pack_evalsha(command) == redis_py_frame(*command), "and again, from the cache"


def test_keys_are_encoded_like_redis_py_encodes_them() -> None:
    command = ("EVALSHA", "d" * 40, 1, "clé", 1)
    assert pack_evalsha(command, "latin-1") == redis_py_frame(*command, encoding="latin-1")


def test_the_frame_cache_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_protocol, "_MAX_FRAMES", 2)
    monkeypatch.setattr(_protocol, "_FRAMES", {})
    for cost in range(5):
        command = ("EVALSHA", "e" * 40, 1, "key", cost)
        assert pack_evalsha(command) == redis_py_frame(*command)
        assert len(_protocol._FRAMES) <= 2


@pytest.fixture
def sync_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


def test_a_plain_client_sends_directly(sync_client: redis.Redis) -> None:
    assert sends_directly(sync_client)


def test_an_override_on_the_instance_keeps_the_generic_path(sync_client: redis.Redis) -> None:
    sync_client.execute_command = lambda *args, **options: None  # type: ignore[method-assign]
    assert not sends_directly(sync_client)


def test_a_single_connection_client_keeps_the_generic_path(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, single_connection_client=True)
    try:
        assert not sends_directly(client)
    finally:
        client.close()


class Spy:
    """A class-level wrapper of ``execute_command``, as tracing instrumentation installs."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def wrap(self, execute: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(execute)
        def traced(client: Any, *args: Any, **options: Any) -> Any:
            self.sent.append(args[0])
            return execute(client, *args, **options)

        return traced

    def awrap(self, execute: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(execute)
        async def traced(client: Any, *args: Any, **options: Any) -> Any:
            self.sent.append(args[0])
            return await execute(client, *args, **options)

        return traced


def test_instrumentation_on_the_class_still_sees_every_script_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentinel = make_sentinel(redis_url)
    spy = Spy()
    try:
        sentinel.check()
        assert sentinel.evaluate(EP, "t").allowed
        assert spy.sent == []
        monkeypatch.setattr(redis.Redis, "execute_command", spy.wrap(redis.Redis.execute_command))
        store = sentinel.store
        assert isinstance(store, RedisStore)
        assert not sends_directly(store.client)
        assert sentinel.evaluate(EP, "t").allowed
        assert spy.sent == ["EVALSHA"]
    finally:
        sentinel.close()


async def test_instrumentation_on_the_async_class_still_sees_every_script_call(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentinel = make_sentinel(redis_url)
    spy = Spy()
    try:
        await sentinel.acheck()
        store = sentinel.async_store
        assert isinstance(store, AsyncRedisStore)
        assert sends_directly(store.client)
        monkeypatch.setattr(
            redis.asyncio.Redis,
            "execute_command",
            spy.awrap(redis.asyncio.Redis.execute_command),
        )
        assert not sends_directly(store.client)
        assert (await sentinel.aevaluate(EP, "t")).allowed
        assert spy.sent == ["EVALSHA"]
    finally:
        await sentinel.aclose()


@pytest.mark.parametrize("algorithm", ["token_bucket", "sliding_window"])
async def test_direct_and_generic_paths_decide_alike(
    redis_url: str, algorithm: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bucket drained alternately by both paths, sync and async, to the same
    end: 100 admitted, then denials; the script flushed midway is reloaded either way."""
    sentinel = make_sentinel(redis_url, algorithm)
    admin = redis.Redis.from_url(redis_url)
    spy = Spy()
    try:
        sentinel.check()
        verdicts = []
        for i in range(104):
            if i in (49, 50, 52):  # reloads: sync generic, async direct, sync direct
                admin.script_flush()
            is_async, generic = i % 4 >= 2, i % 2 == 1
            with monkeypatch.context() as patch:
                if generic and is_async:
                    patch.setattr(
                        redis.asyncio.Redis,
                        "execute_command",
                        spy.awrap(redis.asyncio.Redis.execute_command),
                    )
                elif generic:
                    patch.setattr(
                        redis.Redis, "execute_command", spy.wrap(redis.Redis.execute_command)
                    )
                if is_async:
                    decision = await sentinel.aevaluate(EP, "shared")
                else:
                    decision = sentinel.evaluate(EP, "shared")
            verdicts.append(decision.allowed)
        assert verdicts == [True] * 100 + [False] * 4
        assert spy.sent.count("EVALSHA") == 52 + 1, "generic half, plus its NOSCRIPT retry"
        assert spy.sent.count("SCRIPT LOAD") == 1
        (key,) = TenantIdentity("shared").bucket_keys(sentinel.config.policies[EP])
        assert admin.pttl(key) > 0
    finally:
        sentinel.close()
        await sentinel.aclose()
        admin.close()
