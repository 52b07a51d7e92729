"""``routes["*"]`` and ``@exempt`` in Flask (SPEC §5, issue 27): every route no other
entry and no decorator guards is charged to the default; ``@exempt`` views and
blueprints, static files (the app's and a blueprint's) and unrouted requests are not; a
decorated or routed view pays for its own id only."""

from __future__ import annotations

from pathlib import Path

from flask import Blueprint, Flask
from flask.views import MethodView

from sentinel_flask import exempt, rate_limited
from tests.flask.apps import MakeApp
from tests.support.default_route import DEFAULT_ID, OWN_ID, default_route_config, policy_names


def views(app: Flask, static: Path | None = None) -> None:
    @app.get("/plain")
    def plain() -> str:
        return "plain"

    @app.get("/other")
    def other() -> str:
        return "other"

    @app.get("/health")
    @exempt
    def health() -> str:
        return "ok"

    @exempt
    @app.get("/exempt-above")
    def exempt_above() -> str:
        return "ok"

    @app.get("/decorated")
    @rate_limited(OWN_ID)
    def decorated() -> str:
        return "decorated"

    @app.get("/routed")
    def routed() -> str:
        return "routed"

    @exempt
    class Quiet(MethodView):
        def get(self) -> str:
            return "quiet"

    class Half(MethodView):
        @exempt
        def get(self) -> str:
            return "half"

        def post(self) -> str:
            return "half"

    app.add_url_rule("/quiet", view_func=Quiet.as_view("quiet"))
    app.add_url_rule("/half", view_func=Half.as_view("half"))

    hooks = exempt(Blueprint("hooks", __name__, url_prefix="/hooks"))

    @hooks.get("/ping")
    def ping() -> str:
        return "pong"

    assets = Blueprint("assets", __name__, static_folder=static, static_url_path="/assets")
    app.register_blueprint(hooks)
    app.register_blueprint(assets)


def make(make_app: MakeApp, redis_url: str, tmp_path: Path) -> Flask:
    (tmp_path / "logo.txt").write_text("logo", encoding="utf-8")
    app = make_app(
        default_route_config(redis_url, **{"GET /routed": OWN_ID}),
        views=lambda app: views(app, tmp_path),
    )
    assert any(rule.endpoint == "static" for rule in app.url_map.iter_rules())
    app.static_folder = str(tmp_path)
    return app


def test_the_default_guards_every_undecorated_route_and_shares_one_bucket(
    make_app: MakeApp, redis_url: str, tmp_path: Path
) -> None:
    client = make(make_app, redis_url, tmp_path).test_client()
    responses = [client.get("/plain"), client.get("/other"), client.get("/plain")]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert policy_names(responses[0].headers.get("RateLimit-Policy")) == [DEFAULT_ID]
    assert client.post("/half").status_code == 429  # an unmarked method of a class view


def test_exempt_views_static_files_and_404s_are_never_charged(
    make_app: MakeApp, redis_url: str, tmp_path: Path
) -> None:
    app = make(make_app, redis_url, tmp_path)
    client = app.test_client()
    paths = (
        "/health",
        "/exempt-above",
        "/quiet",
        "/half",
        "/hooks/ping",
        "/static/logo.txt",
        "/assets/logo.txt",
        "/nowhere",
    )
    for path in paths:
        responses = [client.get(path) for _ in range(4)]
        assert {r.status_code for r in responses} == {404 if path == "/nowhere" else 200}, path
        assert all("RateLimit" not in r.headers for r in responses), path
        for response in responses:
            response.close()
    heads = [client.head("/half") for _ in range(4)]  # HEAD answered by the exempt get
    assert all(r.status_code == 200 and "RateLimit" not in r.headers for r in heads)
    assert [client.get("/plain").status_code for _ in range(3)] == [200, 200, 429]


def test_a_decorated_or_routed_view_pays_for_its_own_id_only(
    make_app: MakeApp, redis_url: str, tmp_path: Path
) -> None:
    client = make(make_app, redis_url, tmp_path).test_client()
    for path in ("/decorated", "/routed"):
        response = client.get(path)
        assert policy_names(response.headers["RateLimit-Policy"]) == [OWN_ID], path
    for _ in range(2):
        client.get("/plain")
    assert client.get("/plain").status_code == 429
    assert client.get("/decorated").status_code == 200  # the default's bucket is not its own
