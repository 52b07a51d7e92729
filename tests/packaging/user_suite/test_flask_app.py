"""A user's Flask app and its tests, as docs/testing.md shows them."""

import pytest
from flask import Flask

from sentinel_core.testing import ratelimit_headers
from sentinel_flask import Sentinel, rate_limited


def create_app(**config):
    app = Flask(__name__)
    app.config["SENTINEL"] = {
        "redis_url": "memory://",
        "anonymous": {"cookie_secret": "a-test-secret-of-at-least-32-bytes", "secure": False},
        "policies": {
            "search": {
                "algorithm": "sliding_window",
                "rate": "3/second",
                "identity": "anonymous",
                "fail_mode": "closed",
            }
        },
        **config,
    }

    @app.get("/search")
    @rate_limited("search")
    def search():
        return {"results": []}

    Sentinel(app)
    return app


@pytest.fixture
def client():
    return create_app().test_client()  # a fresh app: a fresh memory:// store


def test_search_is_limited_and_refills(client, sentinel_clock):
    assert [client.get("/search").status_code for _ in range(4)] == [200, 200, 200, 429]

    sentinel_clock.advance(2.5)  # the whole window, and then some, has passed
    response = client.get("/search")
    assert response.status_code == 200
    assert ratelimit_headers(response.headers)["policy"]["search"] == {
        "q": 3,
        "w": 1,
        "pk": ratelimit_headers(response.headers)["state"]["search"]["pk"],
    }


def test_limiting_switched_off():
    client = create_app(enabled=False, redis_url="redis://127.0.0.1:1/0").test_client()
    responses = [client.get("/search") for _ in range(10)]
    assert [response.status_code for response in responses] == [200] * 10
    assert all("RateLimit" not in response.headers for response in responses)
