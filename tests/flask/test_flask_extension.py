"""The extension's life cycle: configuration, start-up checks, validation, app factories."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from flask import Flask, Request
from flask.views import MethodView
from prometheus_client import CollectorRegistry

import sentinel_core
import sentinel_flask._extension
from sentinel_core import ConfigError, StartupError, UnknownEndpointError
from sentinel_flask import Sentinel, rate_limited
from tests.flask.apps import MakeApp, with_routes
from tests.support.adapter_config import bearer, spec_config
from tests.support.contended_lock import ContendedLock
from tests.support.redis_server import RedisServer


def tailor(client: Any, tenant: str = "tenant-a") -> int:
    status: int = client.post("/v1/tailor", headers={"Authorization": bearer(tenant)}).status_code
    return status


def test_init_app_refuses_an_unknown_key_naming_its_path(make_app: MakeApp) -> None:
    config = spec_config("memory://")
    config["policies"]["pdftalk.ingest"]["burts"] = 5

    with pytest.raises(ConfigError) as caught:
        make_app(config)

    assert caught.value.path == "policies.pdftalk.ingest.burts"
    assert "policies.pdftalk.ingest.burts: unknown key" in str(caught.value)


def test_init_app_refuses_a_bad_value_naming_its_path(make_app: MakeApp) -> None:
    config = spec_config("memory://")
    config["policies"]["resumint.tailor"]["rate"] = "2.5/second"

    with pytest.raises(ConfigError) as caught:
        make_app(config)

    assert caught.value.path == "policies.resumint.tailor.rate"


def test_init_app_refuses_a_missing_configuration(make_app: MakeApp) -> None:
    with pytest.raises(ConfigError, match=r"SENTINEL: missing") as caught:
        make_app(None)

    assert caught.value.path == "SENTINEL"


def test_init_app_refuses_a_configuration_that_is_not_a_mapping(make_app: MakeApp) -> None:
    with pytest.raises(ConfigError, match="expected a mapping, got list"):
        make_app(["redis_url", "memory://"])


def test_init_app_refuses_both_a_mapping_and_a_file(make_app: MakeApp, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        make_app(spec_config("memory://"), SENTINEL_CONFIG_FILE=str(tmp_path / "x.toml"))

    assert caught.value.path == "SENTINEL_CONFIG_FILE"


TOML = """
[sentinel]
redis_url = "{redis_url}"

[sentinel.jwt]
algorithms = ["HS256"]
key = "test-jwt-key-0123456789abcdef-0123456789"

[sentinel.policies."resumint.tailor"]
algorithm = "token_bucket"
rate = "1/minute"
burst = 2
fail_mode = "closed"
"""


def test_init_app_reads_a_toml_file_relative_to_the_app_root(
    tmp_path: Path, redis_url: str
) -> None:
    (tmp_path / "sentinel.toml").write_text(TOML.format(redis_url=redis_url))
    app = Flask("toml_app", root_path=str(tmp_path))
    app.config["SENTINEL_CONFIG_FILE"] = "sentinel.toml"

    @app.post("/v1/tailor")
    @rate_limited("resumint.tailor")
    def tailor_view() -> str:
        return "ok"

    Sentinel(app, registry=CollectorRegistry())
    try:
        client = app.test_client()
        assert [tailor(client) for _ in range(3)] == [200, 200, 429]
    finally:
        app.extensions["sentinel"].close()


def test_init_app_names_an_unreadable_toml_file(make_app: MakeApp, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        make_app(None, SENTINEL_CONFIG_FILE=str(tmp_path / "missing.toml"))


def test_init_app_refuses_an_allkeys_lru_redis_with_a_clear_message(
    make_app: MakeApp, lru_redis_server: RedisServer
) -> None:
    with pytest.raises(StartupError) as caught:
        make_app(spec_config(lru_redis_server.url))

    message = str(caught.value)
    assert "maxmemory-policy is allkeys-lru" in message
    assert "noeviction" in message


def test_init_app_refuses_a_redis_without_maxmemory(
    make_app: MakeApp, unbounded_redis_server: RedisServer
) -> None:
    with pytest.raises(StartupError, match="maxmemory is 0 bytes"):
        make_app(spec_config(unbounded_redis_server.url))


def test_init_app_on_an_unreachable_redis_logs_and_starts(
    make_app: MakeApp, dead_redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="sentinel"):
        app = make_app(spec_config(dead_redis_url))

    assert any("unreachable" in record.getMessage() for record in caplog.records)
    client = app.test_client()
    # The decision table answers: fail-closed is 503, fail-open is capped, not refused.
    assert client.post("/v1/ingest", headers={"Authorization": bearer("t")}).status_code == 503
    assert tailor(client) == 200


def test_init_app_refuses_a_routes_entry_naming_no_policy(make_app: MakeApp) -> None:
    config = with_routes(spec_config("memory://"), **{"POST /v1/upload": "pdftalk.ingets"})

    with pytest.raises(ConfigError) as caught:
        make_app(config)

    assert caught.value.path == "routes.POST /v1/upload"


def test_init_app_refuses_a_decorator_naming_no_policy(make_app: MakeApp) -> None:
    def views(app: Flask) -> None:
        @app.post("/typo")
        @rate_limited("pdftalk.ingets")
        def typo() -> str:
            return "never"

    with pytest.raises(UnknownEndpointError) as caught:
        make_app(spec_config("memory://"), views=views)

    assert caught.value.endpoint_id == "pdftalk.ingets"


def test_init_app_refuses_a_tenant_policy_without_the_jwt_section(make_app: MakeApp) -> None:
    config = spec_config("memory://")
    del config["jwt"]

    with pytest.raises(ConfigError) as caught:
        make_app(config)

    assert caught.value.path == "jwt"


def test_a_view_registered_after_init_app_is_checked_by_validate(make_app: MakeApp) -> None:
    app = make_app(spec_config("memory://"))

    @app.get("/late")
    @rate_limited("auth.logn")
    def late() -> str:
        return "never"

    with pytest.raises(UnknownEndpointError, match=r"auth\.logn"):
        Sentinel().validate(app)


def test_a_typo_in_a_late_view_fails_that_view_alone_loudly(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    app = make_app(spec_config("memory://"), PROPAGATE_EXCEPTIONS=False)

    @app.get("/late")
    @rate_limited("auth.logn")
    def late() -> str:
        return "never"

    client = app.test_client()
    with caplog.at_level(logging.ERROR):
        statuses = [client.get(path).status_code for path in ("/health", "/late", "/health")]
        statuses.append(tailor(client))

    assert statuses == [200, 500, 200, 200]
    named = [r for r in caplog.records if r.name == "sentinel" and "'late'" in r.getMessage()]
    assert len(named) == 1, "reported once, at the first request"
    assert "auth.logn" in named[0].getMessage()
    failures = [r for r in caplog.records if r.exc_info and "/late" in r.getMessage()]
    assert len(failures) == 1, "and each request to the view fails with its reason logged"
    assert isinstance(failures[0].exc_info[1], UnknownEndpointError)  # type: ignore[index]


def test_a_late_view_naming_a_tenant_policy_without_jwt_fails_alone(make_app: MakeApp) -> None:
    config = {
        "redis_url": "memory://",
        "anonymous": spec_config("memory://")["anonymous"],
        "policies": {
            "tenant.only": {
                "algorithm": "token_bucket",
                "rate": "1/second",
                "fail_mode": "open",
                "fallback_rate": "1/second",
            },
            "anon": {
                "algorithm": "token_bucket",
                "rate": "5/second",
                "fail_mode": "closed",
                "identity": "anonymous",
            },
        },
    }
    app = make_app(config, views=None)

    @app.get("/tenant")
    @rate_limited("tenant.only")
    def tenant() -> str:
        return "never"

    @app.get("/anon")
    @rate_limited("anon")
    def anon() -> str:
        return "ok"

    client = app.test_client()
    with pytest.raises(ConfigError, match="jwt"):
        client.get("/tenant")
    assert client.get("/anon").status_code == 200


def test_a_method_view_method_is_validated_too(make_app: MakeApp) -> None:
    def views(app: Flask) -> None:
        class Things(MethodView):
            @rate_limited("things.create")
            def post(self) -> str:
                return "never"

        app.add_url_rule("/things", view_func=Things.as_view("things"))

    with pytest.raises(UnknownEndpointError, match=r"things\.create"):
        make_app(spec_config("memory://"), views=views)


def test_a_routes_entry_that_no_route_answers_is_refused_by_init_app(make_app: MakeApp) -> None:
    config = with_routes(spec_config("memory://"), **{"POST /v1/uplaod": "pdftalk.ingest"})

    with pytest.raises(ConfigError) as caught:
        make_app(config)

    assert caught.value.path == "routes.POST /v1/uplaod"


def test_a_routes_entry_for_a_view_registered_later_is_checked_by_validate(
    make_app: MakeApp,
) -> None:
    config = spec_config("memory://", routes={"POST /v1/later": "pdftalk.ingest"})
    app = make_app(config, views=None)

    with pytest.raises(ConfigError) as caught:
        Sentinel().validate(app)
    assert caught.value.path == "routes.POST /v1/later"

    @app.post("/v1/later")
    def later() -> str:
        return "ok"

    Sentinel().validate(app)
    assert app.test_client().post("/v1/later", headers={"Authorization": bearer("t")}).text == "ok"


def test_validate_passes_on_a_correct_app(make_app: MakeApp) -> None:
    app = make_app(with_routes(spec_config("memory://")))

    with app.app_context():
        Sentinel().validate()
    assert app.test_client().get("/health").status_code == 200


def test_init_app_twice_on_one_app_is_refused(make_app: MakeApp) -> None:
    app = make_app(spec_config("memory://"))

    with pytest.raises(RuntimeError, match="already has a Sentinel"):
        Sentinel().init_app(app)


async def _async_view() -> str:
    return "never"


def _sync_view() -> str:
    return "never"


@pytest.mark.parametrize("view", [_sync_view, _async_view], ids=["sync", "async"])
def test_a_decorated_view_on_an_app_without_init_app_says_so(view: Any) -> None:
    app = Flask("uninitialised")
    app.config["TESTING"] = True
    guarded = rate_limited("resumint.tailor")(view)
    app.add_url_rule("/v1/tailor", "tailor", guarded, methods=["POST"])

    with pytest.raises(RuntimeError, match=r"call Sentinel\(app\) or sentinel.init_app\(app\)"):
        app.test_client().post("/v1/tailor")


def test_rate_limited_needs_an_endpoint_id() -> None:
    with pytest.raises(TypeError, match="endpoint id"):
        rate_limited(lambda: None)  # type: ignore[arg-type]


def test_app_factory_serves_two_apps_with_different_policies_in_one_process(
    make_app: MakeApp, redis_url: str
) -> None:
    sentinel = Sentinel(registry=CollectorRegistry())
    strict = spec_config(redis_url)
    strict["policies"]["resumint.tailor"]["burst"] = 1
    lenient = spec_config(redis_url)
    lenient["policies"]["resumint.tailor"]["burst"] = 4
    lenient["policies"]["resumint.tailor"]["version"] = 2  # its own buckets

    first = make_app(strict, sentinel=sentinel)
    second = make_app(lenient, sentinel=sentinel)

    assert first.extensions["sentinel"] is not second.extensions["sentinel"]
    assert not any(isinstance(value, Flask) for value in vars(sentinel).values())
    with first.app_context():
        assert sentinel.get_core() is first.extensions["sentinel"]
    assert sentinel.get_core(second) is second.extensions["sentinel"]
    assert isinstance(sentinel.get_core(second), sentinel_core.Sentinel)
    one, two = first.test_client(), second.test_client()
    assert [tailor(one) for _ in range(2)] == [200, 429]
    assert [tailor(two) for _ in range(5)] == [200, 200, 200, 200, 429]


def test_sentinel_app_form_and_the_memory_store() -> None:
    app = Flask("direct")
    app.config["SENTINEL"] = spec_config("memory://")

    @app.post("/v1/tailor")
    @rate_limited("resumint.tailor")
    def view() -> str:
        return "ok"

    Sentinel(app, registry=CollectorRegistry())
    client = app.test_client()

    assert [tailor(client) for _ in range(4)] == [200, 200, 200, 429]


@pytest.mark.slow
def test_an_unreachable_redis_at_start_up_is_used_once_it_is_back(make_app: MakeApp) -> None:
    server = RedisServer().start()
    server.stop()
    try:
        app = make_app(spec_config(server.url))  # logs, does not raise
        client = app.test_client()
        ingest = {"Authorization": bearer("tenant-a")}
        assert client.post("/v1/ingest", headers=ingest).status_code == 503

        server.start()  # same port

        assert client.post("/v1/ingest", headers=ingest).status_code == 200
        checker = server.client()
        assert checker.dbsize() == 1
        checker.close()
    finally:
        server.close()


@pytest.mark.slow
def test_an_unfit_redis_found_after_start_up_is_reported_critical(
    make_app: MakeApp, caplog: pytest.LogCaptureFixture
) -> None:
    server = RedisServer(policy="allkeys-lru").start()
    server.stop()
    try:
        app = make_app(spec_config(server.url))
        server.start()
        with caplog.at_level(logging.CRITICAL, logger="sentinel"):
            app.test_client().post("/v1/ingest", headers={"Authorization": bearer("t")})
    finally:
        server.close()

    assert any(
        record.levelno == logging.CRITICAL and "allkeys-lru" in record.getMessage()
        for record in caplog.records
    )


def test_the_metrics_registry_given_to_the_extension_counts_the_apps_decisions(
    make_app: MakeApp,
) -> None:
    registry = CollectorRegistry()
    app = make_app(spec_config("memory://"), sentinel=Sentinel(registry=registry))
    client = app.test_client()

    for _ in range(4):
        tailor(client)

    def count(allowed: str, reason: str) -> float | None:
        labels = {"endpoint_id": "resumint.tailor", "decision_reason": reason, "allowed": allowed}
        return registry.get_sample_value("sentinel_decisions_total", labels)

    assert count("true", "allowed") == 3
    assert count("false", "rate_limited") == 1


class ApiKeys:
    """A plugin identifying tenants by an API key header, recording what it was given."""

    def __init__(self) -> None:
        self.natives: list[object] = []

    @sentinel_core.hookimpl
    def sentinel_identify(self, request: sentinel_core.RequestView, policy: Any) -> str | None:
        self.natives.append(request.native)
        return {"key-1": "tenant-1"}.get(request.headers.get("x-api-key", ""))


def test_plugins_given_to_the_extension_see_the_flask_request(make_app: MakeApp) -> None:
    plugin = ApiKeys()
    app = make_app(spec_config("memory://"), sentinel=Sentinel(plugins=[plugin]))
    client = app.test_client()

    codes = [
        client.post("/v1/tailor", headers={"X-Api-Key": "key-1"}).status_code for _ in range(4)
    ]

    assert codes == [200, 200, 200, 429]
    assert client.post("/v1/tailor", headers={"X-Api-Key": "nope"}).status_code == 401
    assert all(isinstance(native, Request) for native in plugin.natives)


class _SlowToInspect:
    """A view whose inspection by the validation blocks until released, and is counted."""

    def __init__(self) -> None:
        self.inspections = 0
        self.inspecting = threading.Event()
        self.release = threading.Event()
        self.__name__ = "slow"

    def __call__(self) -> str:
        return "slow"

    @property
    def view_class(self) -> None:
        self.inspections += 1
        self.inspecting.set()
        assert self.release.wait(10)
        return None


def test_requests_racing_the_first_validation_wait_for_it_and_validate_once(
    make_app: MakeApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    validations: list[Flask] = []
    validate = sentinel_flask._extension._unguardable_views

    def counted(app: Flask, core: sentinel_core.Sentinel) -> frozenset[str]:
        validations.append(app)
        return validate(app, core)

    app = make_app(spec_config("memory://"))
    monkeypatch.setattr(sentinel_flask._extension, "_unguardable_views", counted)
    view = _SlowToInspect()
    app.add_url_rule("/slow", view_func=view)
    (hook,) = app.before_request_funcs[None]
    lock = ContendedLock()
    hook.__self__._lock = lock  # type: ignore[attr-defined]
    statuses: list[int] = []

    def get() -> None:
        statuses.append(app.test_client().get("/slow").status_code)

    first = threading.Thread(target=get)
    first.start()
    assert view.inspecting.wait(10)  # the first request is validating, holding the lock
    second = threading.Thread(target=get)
    second.start()
    assert lock.contended.wait(10)  # the second request waits for that validation
    view.release.set()
    first.join(10)
    second.join(10)

    assert statuses == [200, 200]
    assert validations == [app]
