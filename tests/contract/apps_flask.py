"""The contract app on Flask, through its test client."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from flask import Flask, Response, abort, jsonify, stream_with_context
from prometheus_client import CollectorRegistry

import sentinel_core
from sentinel_core import SentinelError
from sentinel_flask import RateLimitExceeded, Sentinel, rate_limited
from tests.contract.harness import (
    Refused,
    Reply,
    contract_user,
    in_threads,
    lower_headers,
    rendered,
    renders_denials,
    report_bad,
    report_midway,
    routes_for,
    spell_angles,
)


def build_app(config: Mapping[str, Any]) -> Flask:
    config, render = renders_denials(config)
    app = Flask("contract")
    app.config["SENTINEL"] = routes_for(config, spell_angles)
    if render:

        @app.errorhandler(429)
        @app.errorhandler(503)
        def render_denial(error: RateLimitExceeded) -> tuple[Response, int]:
            return jsonify(rendered(error.decision)), error.code or 500

    @app.post("/decorated")
    @rate_limited("small")
    def decorated() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/same/<int:item_id>")
    @rate_limited("small")
    def same(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.post("/different/<int:item_id>")
    @rate_limited("small")
    async def different(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.get("/routed/<int:item_id>")
    def routed(item_id: int) -> dict[str, int]:
        return {"item": item_id}

    @app.post("/login")
    @rate_limited("device")
    def login() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/inner/<int:status>")
    @rate_limited("device")
    def inner(status: int) -> Response:
        return Response(status=status)

    @app.post("/count/<int:status>")
    @rate_limited("failures")
    def count(status: int) -> Response:
        return Response(status=status)

    @app.post("/raise")
    @rate_limited("failures")
    def fail() -> None:
        raise RuntimeError("the handler failed")

    @app.post("/refuse")
    @rate_limited("failures")
    def refuse() -> None:
        abort(403)

    @app.get("/slot/<int:kind>")
    @rate_limited("slot")
    def slot(kind: int) -> None:
        if kind == 1:
            raise RuntimeError("the handler failed")
        abort(403)

    @app.get("/stream")
    def stream() -> Response:
        def chunks() -> Iterator[bytes]:
            yield from (b"a", b"b", b"c")

        return Response(stream_with_context(chunks()))

    @app.post("/usage/<int:units>")
    @rate_limited("usage")
    async def usage(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.post("/usage-sync/<int:units>")
    @rate_limited("usage")
    def usage_sync(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.get("/usage-stream/<int:units>")
    @rate_limited("usage")
    def usage_stream(units: int) -> Response:
        def chunks() -> Iterator[bytes]:  # iterated by the WSGI server, after the view
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return Response(chunks())

    @app.get("/usage-astream/<int:units>")
    @rate_limited("usage")
    def usage_astream(units: int) -> Response:
        def chunks() -> Iterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return Response(stream_with_context(chunks()))

    @app.get("/usage-download/<int:units>")
    @rate_limited("usage")
    def usage_download(units: int) -> Response:
        def chunks() -> Iterator[bytes]:
            for chunk in (b"a", b"b", b"c"):
                sentinel_core.settle(units)
                yield chunk

        return Response(chunks(), headers={"Content-Length": "3"})

    @app.post("/usage-raise/<int:units>")
    @rate_limited("usage")
    def usage_raise(units: int) -> None:
        sentinel_core.settle(units)
        raise RuntimeError("the handler failed")

    @app.post("/usage-count/<int:status>")
    @rate_limited("usage.count")
    def usage_count(status: int) -> Response:
        sentinel_core.settle(7)
        return Response(status=status)

    @app.post("/report/<int:units>")
    def report(units: int) -> dict[str, int]:
        sentinel_core.settle(units)
        return {"units": units}

    @app.post("/report-bad/<int:kind>")
    def report_bad_(kind: int) -> None:
        report_bad(kind)

    @app.post("/report-midway/<int:units>")
    def report_midway_(units: int) -> dict[str, int]:
        report_midway(units)
        return {"units": units}

    @app.get("/user")
    @rate_limited("user")
    def user() -> dict[str, bool]:
        return {"ok": True}

    @app.get("/open")
    def open_() -> dict[str, bool]:
        return {"ok": True}

    try:
        Sentinel(registry=CollectorRegistry(), identify=contract_user).init_app(app)
    except SentinelError as exc:
        raise Refused(str(exc)) from exc
    return app


class FlaskClient:
    def __init__(self, app: Flask) -> None:
        self.app = app
        self.core: sentinel_core.Sentinel = app.extensions["sentinel"]
        self._http = app.test_client()

    def request(self, method: str, path: str, *, headers: Mapping[str, str] | None = None) -> Reply:
        response = self._http.open(
            path,
            method=method,
            headers=dict(headers or {}),
            environ_base={"REMOTE_ADDR": "203.0.113.7"},
        )
        body = response.get_data()
        response.close()
        return Reply(
            response.status_code,
            lower_headers(list(response.headers.items())),
            body,
            response.headers.getlist("Set-Cookie"),
        )

    def concurrently(
        self, requests: Sequence[tuple[str, str]], *, headers: Mapping[str, str] | None = None
    ) -> list[Reply]:
        return in_threads(self, requests, headers)

    def close(self) -> None:
        self.app.extensions["sentinel"].close()


class FlaskFactory:
    name = "flask"

    def build(self, config: Mapping[str, Any]) -> FlaskClient:
        return FlaskClient(build_app(config))
