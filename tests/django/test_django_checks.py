"""Each system check fires on a bad settings fixture and stays silent on a good one."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.checks import CheckMessage, run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.handlers.asgi import ASGIHandler
from django.core.handlers.wsgi import WSGIHandler
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django_harness import Configure
from djproject import bad_urls, drf_urls

from tests.support.adapter_config import spec_config
from tests.support.redis_server import RedisServer

MIDDLEWARE = ["sentinel_django.middleware.SentinelMiddleware"]


def _sentinel_messages(*, deploy: bool = False) -> list[CheckMessage]:
    return run_checks(tags=["sentinel"], include_deployment_checks=deploy)


def _ids(messages: list[CheckMessage]) -> list[str]:
    return [message.id for message in messages]


def _with_policy(config: dict[str, Any], endpoint_id: str, **changes: Any) -> dict[str, Any]:
    policies = {**config["policies"]}
    policies[endpoint_id] = {**policies[endpoint_id], **changes}
    return {**config, "policies": policies}


def test_good_settings_are_silent_including_the_deploy_redis_check(configure: Configure) -> None:
    configure()

    assert _sentinel_messages(deploy=True) == []


def test_manage_py_check_passes_on_good_settings(configure: Configure) -> None:
    configure()
    out = io.StringIO()
    call_command("check", "--deploy", "--tag", "sentinel", stdout=out)

    assert "no issues" in out.getvalue()


@pytest.mark.parametrize(
    ("change", "key_path"),
    [
        ({"burts": 5}, "policies.pdftalk.ingest.burts: unknown key"),
        ({"rate": "3/fortnight"}, "policies.pdftalk.ingest.rate"),
        ({"fail_mode": None}, "policies.pdftalk.ingest.fail_mode"),
    ],
    ids=["unknown_key", "bad_rate", "missing_fail_mode"],
)
def test_invalid_configuration_is_e001_naming_the_key_path(
    redis_url: str, change: dict[str, Any], key_path: str
) -> None:
    config = _with_policy(spec_config(redis_url), "pdftalk.ingest", **change)
    if change.get("fail_mode", "") is None:
        del config["policies"]["pdftalk.ingest"]["fail_mode"]
    with override_settings(SENTINEL=config):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E001"]
    assert key_path in messages[0].msg
    assert messages[0].msg.startswith("settings.SENTINEL: ")


@pytest.mark.parametrize(
    ("url", "part"),
    [
        ("redis://127.0.0.1:27301:6379", "the port must be a number from 1 to 65535"),
        ("redis://127.0.0.1/0?db=\u00b2", "invalid value '\u00b2' for the option 'db'"),
        ("redis://127.0.0.1/\u00b2", "the database must be a number"),
        ("redis://127.0.0.1?ssl_cert_reqs=none", "the option 'ssl_cert_reqs' needs a TLS URL"),
    ],
)
def test_a_redis_url_redis_py_would_fail_on_is_e001_at_check_time(url: str, part: str) -> None:
    """A load-time error, reported by ``manage.py check`` (which runserver and migrate
    run first), naming the part: not a ValueError on every guarded request."""
    with override_settings(SENTINEL=spec_config(url)):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E001"]
    assert f"settings.SENTINEL: redis_url: {part}" in messages[0].msg


@pytest.mark.parametrize("handler", [WSGIHandler, ASGIHandler])
def test_an_invalid_redis_url_stops_the_handler_from_loading(handler: Any) -> None:
    """Issue 26: Django answered 500 to every guarded request. Loading the handler (a
    server's worker boot, runserver) now fails, naming the key."""
    with (
        override_settings(SENTINEL=spec_config("redis://127.0.0.1:27301:6379")),
        pytest.raises(ImproperlyConfigured, match="redis_url: the port must be a number"),
    ):
        handler()


@pytest.mark.parametrize(
    "value", [None, ["not", "a", "dict"]], ids=["missing_setting", "not_a_mapping"]
)
def test_missing_or_non_mapping_setting_is_e001(value: Any) -> None:
    with override_settings(SENTINEL=value):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E001"]


def test_route_naming_an_unknown_endpoint_is_e002_not_e001(redis_url: str) -> None:
    config = spec_config(
        redis_url,
        routes={"POST items/<int:pk>": "pdftalk.ingest", "GET reports": "reports.render"},
    )
    with override_settings(SENTINEL=config):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E002"]
    assert "'reports.render'" in messages[0].msg
    assert "routes['GET reports']" in messages[0].msg


def test_decorated_views_naming_unknown_endpoints_are_e002_wherever_they_are(
    configure: Configure,
) -> None:
    configure(routes={})
    with override_settings(ROOT_URLCONF="djproject.bad_urls"):
        messages = _sentinel_messages()

    assert set(_ids(messages)) == {"sentinel.E002"}
    named = {message.msg.split("'")[1] for message in messages}
    assert named == bad_urls.UNKNOWN_IDS


def test_drf_views_whose_sentinel_throttle_has_no_policy_are_e006(configure: Configure) -> None:
    configure(routes={})
    with override_settings(ROOT_URLCONF="djproject.bad_drf_urls"):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E006"] * 3
    text = [message.msg for message in messages]
    assert "Nameless (the view of 'nameless')" in text[0]
    assert "no sentinel_endpoint attribute" in text[0]
    assert "'pdftalk.ingets'" in text[1]
    assert "Typo (the view of 'typo')" in text[1]
    assert "'reports.rendr'" in text[2]
    assert [message.obj.__name__ for message in messages] == ["Nameless", "Typo", "TypoViewSet"]


def test_a_drf_throttle_naming_a_tenant_policy_without_jwt_is_e001(redis_url: str) -> None:
    config = spec_config(redis_url, routes={})
    del config["jwt"]
    with override_settings(SENTINEL=config, ROOT_URLCONF="djproject.drf_urls"):
        messages = [m for m in _sentinel_messages() if m.obj is drf_urls.Export]

    assert _ids(messages) == ["sentinel.E001"]
    assert messages[0].msg.startswith("settings.SENTINEL: jwt: ")


def test_tenant_policy_without_jwt_section_is_e001_when_a_view_guards_it(
    redis_url: str,
) -> None:
    config = spec_config(redis_url)
    del config["jwt"]
    with override_settings(SENTINEL=config):
        messages = _sentinel_messages()

    assert set(_ids(messages)) == {"sentinel.E001"}
    assert all(message.msg.startswith("settings.SENTINEL: jwt: ") for message in messages)


@pytest.mark.parametrize(("debug", "expected"), [(False, ["sentinel.W001"]), (True, [])])
def test_memory_store_without_debug_is_w001(debug: bool, expected: list[str]) -> None:
    with override_settings(SENTINEL=spec_config("memory://"), DEBUG=debug):
        assert _ids(_sentinel_messages()) == expected


def test_routes_without_the_middleware_is_w002(configure: Configure) -> None:
    configure()
    with override_settings(MIDDLEWARE=[]):
        assert _ids(_sentinel_messages()) == ["sentinel.W002"]


def test_check_deploy_reports_an_allkeys_lru_redis(
    configure: Configure, lru_redis_server: RedisServer
) -> None:
    configure(redis_url=lru_redis_server.url)

    assert _ids(_sentinel_messages()) == []  # a network check: deploy only
    with pytest.raises(SystemCheckError) as raised:
        call_command("check", "--deploy", stdout=io.StringIO(), stderr=io.StringIO())
    report = str(raised.value)
    assert "sentinel.E003" in report
    assert "maxmemory-policy is allkeys-lru" in report


def test_check_deploy_reports_an_unbounded_redis(
    configure: Configure, unbounded_redis_server: RedisServer
) -> None:
    configure(redis_url=unbounded_redis_server.url)
    messages = _sentinel_messages(deploy=True)

    assert _ids(messages) == ["sentinel.E003"]
    assert "maxmemory is 0 bytes" in messages[0].msg


def test_check_deploy_warns_about_an_unreachable_redis(
    configure: Configure, dead_redis_url: str
) -> None:
    configure(redis_url=dead_redis_url)
    messages = _sentinel_messages(deploy=True)

    assert _ids(messages) == ["sentinel.W003"]
    assert "unreachable" in messages[0].msg


def test_checks_can_be_silenced_by_id(configure: Configure) -> None:
    configure()
    with override_settings(MIDDLEWARE=[], SILENCED_SYSTEM_CHECKS=["sentinel.W002"]):
        out = io.StringIO()
        call_command("check", "--tag", "sentinel", stdout=out)

    assert "1 silenced" in out.getvalue()


def test_an_invalid_configuration_is_one_e001_with_the_deploy_checks_too(redis_url: str) -> None:
    config = _with_policy(spec_config(redis_url), "pdftalk.ingest", rate="3/fortnight")
    with override_settings(SENTINEL=config):
        messages = _sentinel_messages(deploy=True)

    assert _ids(messages) == ["sentinel.E001"]


def test_the_deploy_check_passes_the_memory_store_in_debug() -> None:
    with override_settings(SENTINEL=spec_config("memory://"), DEBUG=True):
        assert _sentinel_messages(deploy=True) == []


def test_a_routes_entry_matching_no_url_pattern_is_e004(configure: Configure) -> None:
    configure(routes={"POST v1/ingset": "pdftalk.ingest", "POST v1/ingest": "pdftalk.ingest"})

    messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E004"]
    assert "routes['POST /v1/ingset']" in messages[0].msg


def test_routes_entries_naming_one_route_are_e005(configure: Configure) -> None:
    configure(routes={"POST v1/ingest": "pdftalk.ingest", "post /v1/ingest": "resumint.tailor"})

    messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E005"]
    assert "routes['post /v1/ingest']" in messages[0].msg
    assert "routes['POST v1/ingest']" in messages[0].msg


def test_a_duplicate_entry_in_a_routes_setting_that_is_not_a_mapping_is_not_looked_for(
    redis_url: str,
) -> None:
    with override_settings(SENTINEL=spec_config(redis_url, routes=["POST v1/ingest"])):
        messages = _sentinel_messages()

    assert _ids(messages) == ["sentinel.E001"]
