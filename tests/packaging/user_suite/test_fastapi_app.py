"""A user's FastAPI app and its tests, as docs/testing.md shows them."""

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from sentinel_core.testing import ratelimit_headers
from sentinel_fastapi import Sentinel, rate_limited

sentinel = Sentinel(
    {
        "redis_url": "memory://",
        "anonymous": {"cookie_secret": "a-test-secret-of-at-least-32-bytes", "secure": False},
        "policies": {
            "auth.login": {
                "algorithm": "token_bucket",
                "rate": "5/minute",
                "identity": "anonymous",
                "fail_mode": "closed",
            }
        },
    }
)
app = FastAPI()
sentinel.init_app(app)


@app.post("/login")
@rate_limited("auth.login")
async def login() -> dict[str, bool]:
    return {"ok": True}


@pytest.fixture
def client(sentinel_reset):
    with TestClient(app) as client:  # runs the lifespan: Sentinel's start-up
        yield client


def test_login_is_limited_and_refills(client, sentinel_clock):
    statuses = [client.post("/login").status_code for _ in range(6)]
    assert statuses == [200] * 5 + [429]

    sentinel_clock.advance(12)  # one token back at 5/minute
    refilled = client.post("/login")
    assert refilled.status_code == 200
    assert ratelimit_headers(refilled.headers)["state"]["auth.login"]["r"] == 0
    assert client.post("/login").status_code == 429


def test_each_test_starts_with_full_limits(client):
    fields = ratelimit_headers(client.post("/login").headers)
    assert fields["policy"]["auth.login"]["q"] == 5
    assert fields["state"]["auth.login"]["r"] == 4
