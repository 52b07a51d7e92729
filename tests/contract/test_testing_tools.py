"""SPEC §9 through every adapter's app: what a user's test suite does with Sentinel's
testing tools (the header parser, the clock, the reset), on real responses."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator

import pytest

from sentinel_core.testing import SentinelClock, ratelimit_headers
from tests.contract.conftest import Build
from tests.contract.test_contract import AUTH, contract_config
from tests.support.redis_server import free_port


def test_ratelimit_headers_reads_every_adapters_real_responses(build: Build) -> None:
    client = build(contract_config("memory://"))

    first, second, denied = (client.request("POST", "/decorated", headers=AUTH) for _ in range(3))

    fields = [ratelimit_headers(reply.headers) for reply in (first, second, denied)]
    pk = fields[0]["policy"]["small"]["pk"]
    assert isinstance(pk, bytes)
    assert len(pk) >= 8
    assert [f["policy"] for f in fields] == [{"small": {"q": 2, "w": 120, "pk": pk}}] * 3
    assert [f["state"]["small"]["r"] for f in fields] == [1, 0, 0]
    assert [f["state"]["small"]["pk"] for f in fields] == [pk] * 3
    t = fields[2]["state"]["small"]["t"]
    assert isinstance(t, int)
    assert t >= int(denied.header("retry-after") or 0) >= 1


def test_ratelimit_headers_reads_layered_and_anonymous_responses(build: Build) -> None:
    layered = {"algorithm": "token_bucket", "rates": ["3/minute", "2/hour"], "fail_mode": "closed"}
    policies = {**contract_config("memory://")["policies"], "small": layered}
    client = build(contract_config("memory://", policies=policies))

    fields = ratelimit_headers(client.request("POST", "/decorated", headers=AUTH).headers)
    login = ratelimit_headers(client.request("POST", "/login").headers)

    assert {name: (v["q"], v["w"]) for name, v in fields["policy"].items()} == {
        "small/minute": (3, 60),
        "small/hour": (2, 3600),
    }
    assert list(fields["state"]) == ["small/hour"]
    assert login["state"]["device"]["r"] == 1


def test_a_users_test_exhausts_advances_and_sees_the_refill(
    build: Build, sentinel_clock: SentinelClock
) -> None:
    client = build(contract_config("memory://"))  # "small": 2 requests, 1 more a minute

    statuses = [client.request("POST", "/decorated", headers=AUTH).status for _ in range(3)]
    sentinel_clock.advance(59.5)
    early = client.request("POST", "/decorated", headers=AUTH)
    sentinel_clock.advance(0.5)
    refilled = [client.request("POST", "/decorated", headers=AUTH).status for _ in range(2)]

    assert statuses == [200, 200, 429]
    assert early.status == 429
    assert early.header("retry-after") == "1"
    assert refilled == [200, 429]


def test_sentinel_reset_gives_each_test_full_limits(
    build: Build, sentinel_reset: Callable[[], None]
) -> None:
    client = build(contract_config("memory://"))
    assert [client.request("POST", "/decorated", headers=AUTH).status for _ in range(3)] == [
        200,
        200,
        429,
    ]

    sentinel_reset()

    assert client.request("POST", "/decorated", headers=AUTH).status == 200


@pytest.fixture
def silent_server() -> Iterator[tuple[str, socket.socket]]:
    """A ``redis_url`` whose port accepts connections that nobody answers: any
    connection a disabled Sentinel opened would wait in its backlog."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0", listener


PASSED_THROUGH = [
    *[("POST", "/decorated", AUTH)] * 4,  # "small" admits 2
    ("POST", "/decorated", {}),  # no token: not even authenticated
    *[("POST", "/login", {})] * 4,  # anonymous "device": no cookie either
    *[("GET", "/routed/1", AUTH)] * 3,
    *[("POST", "/count/401", AUTH)] * 3,
    ("GET", "/stream", AUTH),
]


@pytest.mark.parametrize("redis", ["unreachable", "silent"])
def test_enabled_false_passes_every_request_through_and_never_contacts_redis(
    build: Build, redis: str, silent_server: tuple[str, socket.socket]
) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0" if redis == "unreachable" else silent_server[0]
    client = build(contract_config(url, enabled=False))

    replies = [
        client.request(method, path, headers=headers) for method, path, headers in PASSED_THROUGH
    ]

    assert [reply.status for reply in replies] == [200] * 12 + [401] * 3 + [200]
    assert replies[-1].body == b"abc"
    for reply in replies:
        assert not {"ratelimit", "ratelimit-policy", "retry-after"} & set(reply.headers)
        assert not reply.set_cookies
    with pytest.raises(BlockingIOError):
        silent_server[1].accept()  # no connection was ever opened
