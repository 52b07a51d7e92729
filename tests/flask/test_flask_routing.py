"""Where Sentinel guards a Flask app: decorated views, blueprints, class-based views and
the ``routes`` middleware matched on the resolved rule, never the raw path."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import redis
from flask import Flask
from flask.testing import FlaskClient
from flask.views import MethodView, View

from sentinel_core.testing import ratelimit_headers
from sentinel_flask import rate_limited
from tests.flask.apps import MakeApp, with_routes
from tests.support.adapter_config import bearer, spec_config


def send(client: FlaskClient, method: str, path: str, tenant: str = "tenant-a") -> Any:
    return client.open(path, method=method, headers={"Authorization": bearer(tenant)})


def statuses(client: FlaskClient, method: str, path: str, count: int) -> list[int]:
    return [send(client, method, path).status_code for _ in range(count)]


def test_middleware_guards_an_undecorated_route_named_in_routes(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    responses = [send(client, "POST", "/v1/upload") for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].json == {"view": "upload"}
    assert responses[0].headers["RateLimit"].startswith('"pdftalk.ingest";r=2;')
    assert responses[3].headers["Content-Type"] == "application/problem+json"


def test_middleware_matches_the_method_too(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    # Only "POST /v1/upload" is in routes: GET on the same rule is not guarded.
    responses = [client.get("/v1/upload") for _ in range(5)]

    assert {r.status_code for r in responses} == {200}
    assert not any("RateLimit" in r.headers for r in responses)


def test_middleware_matches_the_rule_template_not_the_raw_path(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    # "GET /reports/<int:report_id>/export": every report id shares the tenant's bucket.
    codes = [send(client, "GET", f"/reports/{i}/export").status_code for i in range(1, 5)]

    assert codes == [200, 200, 200, 429]


def test_middleware_guards_head_like_get(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    assert statuses(client, "HEAD", "/reports/7/export", 3) == [200, 200, 200]
    assert send(client, "GET", "/reports/7/export").status_code == 429


def test_not_found_and_method_not_allowed_are_left_untouched(
    make_app: MakeApp, redis_url: str, redis_client: redis.Redis
) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    missing = send(client, "POST", "/v1/upload/extra")
    wrong_method = send(client, "DELETE", "/v1/upload")

    assert missing.status_code == 404
    assert wrong_method.status_code == 405
    for response in (missing, wrong_method):
        assert "RateLimit" not in response.headers
        assert response.headers["Content-Type"].startswith("text/html")
    assert redis_client.dbsize() == 0


def test_decorator_wins_over_routes_and_the_request_is_counted_once(
    make_app: MakeApp, redis_url: str
) -> None:
    # "POST /v1/both" is in routes (pdftalk.ingest) and decorated (resumint.tailor).
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    responses = [send(client, "POST", "/v1/both") for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    states = [ratelimit_headers(r.headers)["state"] for r in responses]
    assert [state["resumint.tailor"]["r"] for state in states[:3]] == [2, 1, 0]
    assert all(len(r.headers.getlist("RateLimit")) == 1 for r in responses)
    assert all(next(iter(state)) == "resumint.tailor" for state in states)


def test_blueprint_view_is_guarded(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    responses = [send(client, "GET", f"/reports/{i}") for i in range(1, 5)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].json == {"report": 1}
    assert responses[0].headers["RateLimit"].startswith('"pdftalk.ingest"')


def test_method_view_guards_the_decorated_method_only(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    assert statuses(client, "GET", "/documents", 5) == [200] * 5
    posts = [send(client, "POST", "/documents") for _ in range(4)]

    assert [r.status_code for r in posts] == [200, 200, 200, 429]
    assert posts[0].json == {"view": "documents.post"}
    assert "RateLimit" in posts[0].headers


def test_a_routes_entry_and_a_decorated_method_view_method_with_different_ids_both_apply(
    make_app: MakeApp, redis_url: str
) -> None:
    config = with_routes(
        spec_config(redis_url),
        **{"GET /documents": "resumint.tailor", "POST /documents": "resumint.tailor"},
    )
    client = make_app(config).test_client()

    # POST is decorated with pdftalk.ingest and named resumint.tailor by routes: both.
    post = send(client, "POST", "/documents")
    assert post.status_code == 200
    assert post.headers["RateLimit"].startswith('"pdftalk.ingest";r=2;')
    assert ', "resumint.tailor";r=2;' in post.headers["RateLimit"]
    gets = [send(client, "GET", "/documents") for _ in range(3)]
    assert [r.status_code for r in gets] == [200, 200, 429]
    assert gets[0].headers["RateLimit"].startswith('"resumint.tailor";r=1;')


def test_async_view_is_guarded(make_app: MakeApp, redis_url: str) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    responses = [send(client, "POST", "/v1/async") for _ in range(4)]

    assert [r.status_code for r in responses] == [200, 200, 200, 429]
    assert responses[0].json == {"view": "async"}
    assert "RateLimit" in responses[0].headers


def test_response_from_abort_in_an_allowed_view_still_gets_ratelimit_headers(
    make_app: MakeApp, redis_url: str
) -> None:
    client = make_app(spec_config(redis_url)).test_client()

    response = send(client, "POST", "/v1/gone")

    assert response.status_code == 410
    assert response.headers["RateLimit"].startswith('"resumint.tailor";r=2;')


def test_unguarded_route_has_no_ratelimit_headers_and_touches_no_redis(
    make_app: MakeApp, redis_url: str, redis_client: redis.Redis
) -> None:
    client = make_app(with_routes(spec_config(redis_url))).test_client()

    response = client.get("/health")

    assert response.status_code == 200
    assert "RateLimit" not in response.headers
    assert redis_client.dbsize() == 0


def test_decorator_keeps_the_views_name_docstring_and_kind(make_app: MakeApp) -> None:
    app = make_app(spec_config("memory://"))

    tailor = app.view_functions["tailor"]
    assert tailor.__name__ == "tailor"
    assert tailor.__doc__ == "Tailor a résumé."
    assert inspect.iscoroutinefunction(app.view_functions["async_view"])
    documents = app.view_functions["documents"].view_class  # type: ignore[union-attr]
    assert documents.post.__name__ == "post"
    assert documents.post.__doc__ == "Store a document."


def test_stacked_decorators_apply_every_policy(make_app: MakeApp, redis_url: str) -> None:
    app = make_app(spec_config(redis_url))

    @app.post("/v1/stacked")
    @rate_limited("pdftalk.ingest")
    @rate_limited("resumint.tailor")
    def stacked() -> str:
        return "ok"

    client = app.test_client()
    first = send(client, "POST", "/v1/stacked")

    assert first.status_code == 200
    names = sorted(ratelimit_headers(first.headers)["state"])
    assert names == ["pdftalk.ingest", "resumint.tailor"]
    assert statuses(client, "POST", "/v1/stacked", 3) == [200, 200, 429]


def test_class_based_views_decorated_through_dispatch_or_decorators_are_guarded_once(
    make_app: MakeApp, redis_url: str
) -> None:
    class Plain(View):
        methods: ClassVar[list[str]] = ["POST"]

        @rate_limited("resumint.tailor")
        def dispatch_request(self) -> str:
            return "plain"

    class Wrapped(MethodView):
        decorators: ClassVar[list[Callable[..., Any]]] = [rate_limited("resumint.tailor")]

        def post(self) -> str:
            return "wrapped"

    def views(app: Flask) -> None:
        app.add_url_rule("/plain", view_func=Plain.as_view("plain"))
        app.add_url_rule("/wrapped", view_func=Wrapped.as_view("wrapped"))

    # Both rules are in routes too: the decorators win, one decision per request.
    config = spec_config(redis_url, routes={"POST /plain": "pdftalk.ingest"})
    config["routes"]["POST /wrapped"] = "pdftalk.ingest"
    client = make_app(config, views=views).test_client()

    for path in ("/plain", "/wrapped"):
        responses = [send(client, "POST", path, tenant=path) for _ in range(4)]
        assert [r.status_code for r in responses] == [200, 200, 200, 429]
        assert responses[0].headers.getlist("RateLimit")[0].startswith('"resumint.tailor";r=2;')
        assert len(responses[0].headers.getlist("RateLimit")) == 1


def test_middleware_guards_head_on_a_method_view_like_its_get(
    make_app: MakeApp, redis_url: str
) -> None:
    # Documents has no head(): Flask answers HEAD with get(), so the middleware looks at
    # get() for a decorator and, finding none, guards HEAD on the GET entry's bucket.
    config = with_routes(spec_config(redis_url), **{"GET /documents": "resumint.tailor"})
    client = make_app(config).test_client()

    heads = [send(client, "HEAD", "/documents") for _ in range(3)]
    after = send(client, "GET", "/documents")

    assert [r.status_code for r in heads] == [200, 200, 200]
    assert heads[0].headers["RateLimit"].startswith('"resumint.tailor"')
    assert after.status_code == 429
