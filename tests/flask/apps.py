"""The app every Flask test uses: views covering each way a route can be guarded."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Flask, abort, jsonify
from flask.views import MethodView

from sentinel_flask import rate_limited

ROUTES = {
    "POST /v1/upload": "pdftalk.ingest",
    "GET /reports/<int:report_id>/export": "resumint.tailor",
    "POST /v1/both": "pdftalk.ingest",
}
"""The ``routes`` entries `with_routes` adds: undecorated views guarded by the
middleware, and one decorated view that the middleware must leave to its decorator."""

MakeApp = Callable[..., Flask]


def register_views(app: Flask) -> None:
    """The views every test app has."""

    @app.post("/v1/tailor")
    @rate_limited("resumint.tailor")
    def tailor() -> dict[str, str]:
        """Tailor a résumé."""
        return {"view": "tailor"}

    @app.post("/v1/ingest")
    @rate_limited("pdftalk.ingest")
    def ingest() -> dict[str, str]:
        return {"view": "ingest"}

    @app.post("/auth/login")
    @rate_limited("auth.login")
    def login() -> dict[str, str]:
        return {"view": "login"}

    @app.route("/v1/upload", methods=["GET", "POST"])
    def upload() -> dict[str, str]:
        return {"view": "upload"}

    @app.post("/v1/both")
    @rate_limited("resumint.tailor")
    def both() -> dict[str, str]:
        return {"view": "both"}

    @app.post("/v1/gone")
    @rate_limited("resumint.tailor")
    def gone() -> dict[str, str]:
        abort(410)

    @app.post("/v1/async")
    @rate_limited("resumint.tailor")
    async def async_view() -> dict[str, str]:
        return {"view": "async"}

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    reports = Blueprint("reports", __name__, url_prefix="/reports")

    @reports.get("/<int:report_id>")
    @rate_limited("pdftalk.ingest")
    def report(report_id: int) -> Any:
        return jsonify(report=report_id)

    @reports.get("/<int:report_id>/export")
    def export(report_id: int) -> Any:
        return jsonify(export=report_id)

    app.register_blueprint(reports)

    class Documents(MethodView):
        def get(self) -> dict[str, str]:
            return {"view": "documents.get"}

        @rate_limited("pdftalk.ingest")
        def post(self) -> dict[str, str]:
            """Store a document."""
            return {"view": "documents.post"}

    app.add_url_rule("/documents", view_func=Documents.as_view("documents"))


def with_routes(config: dict[str, Any], **routes: str) -> dict[str, Any]:
    """``config`` with the suite's `ROUTES` (and any others) for the middleware."""
    return {**config, "routes": {**ROUTES, **routes}}
