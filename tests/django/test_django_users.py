"""Per-user limits from the app's own auth (a session login through the test client, DRF's
``TokenAuthentication``, an API key named by ``SENTINEL["identify"]``), the anonymous
fallback, and denials rendered by ``SENTINEL["denial_view"]`` (SPEC §2 and §5)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import override_settings
from django_harness import Configure, Http
from rest_framework.authtoken.models import Token

from sentinel_django import conf
from sentinel_django.checks import check_settings
from tests.support.users import USER_POLICY, user_config

VIEWS = "djproject.users_urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "sentinel_django.middleware.SentinelMiddleware",
]


@pytest.fixture(scope="module")
def users_db() -> Iterator[None]:
    """The shared in-memory database of djproject.settings, with Django's tables; an
    open connection keeps it alive until the module is done."""
    anchor = sqlite3.connect("file:sentinel-django-tests?mode=memory&cache=shared", uri=True)
    call_command("migrate", run_syncdb=True, verbosity=0)
    yield
    anchor.close()


@pytest.fixture
def users(users_db: None, redis_url: str) -> Iterator[Configure]:
    """``users(**sentinel)``: settings.SENTINEL with the user policy (and ``sentinel``'s
    extra keys), the auth middleware, and these tests' views; alice, bob and carol."""
    for name in ("alice", "bob", "carol"):
        User.objects.get_or_create(username=name)
    with contextlib.ExitStack() as stack:

        def apply(**extra: Any) -> dict[str, Any]:
            url = extra.pop("redis_url", redis_url)
            extra.setdefault("routes", {"GET routed": USER_POLICY, "GET token-routed": USER_POLICY})
            config = user_config(url, **extra)
            stack.enter_context(
                override_settings(SENTINEL=config, ROOT_URLCONF=VIEWS, MIDDLEWARE=MIDDLEWARE)
            )
            return config

        yield apply
    User.objects.all().delete()


def login(http: Http, name: str) -> None:
    """A session login, as the test client does it (the session cookie is then sent)."""
    http.force_login(User.objects.get(username=name))


def path_of(http: Http) -> str:
    return "/search" if http.flavor == "sync" else "/async-search"


def statuses(http: Http, path: str, times: int, **headers: str) -> list[int]:
    return [http.get(path, **headers).status_code for _ in range(times)]


def test_a_session_user_has_their_own_limit(users: Configure, http: Http) -> None:
    users()
    login(http, "alice")
    path = path_of(http)
    assert statuses(http, path, 4) == [200, 200, 200, 429]
    login(http, "bob")
    response = http.get(path)
    assert response.status_code == 200
    assert response.headers["RateLimit"].startswith(f'"{USER_POLICY}";r=2;')
    assert "sentinel_device" not in response.cookies  # a user is no device


def test_without_a_login_the_request_is_an_anonymous_client_never_a_401(
    users: Configure, http: Http
) -> None:
    users()
    path = path_of(http)
    first = http.get(path)
    assert first.status_code == 200
    assert "sentinel_device" in first.cookies
    assert statuses(http, path, 3) == [200, 200, 429]  # the device's 3
    login(http, "carol")
    assert statuses(http, path, 1) == [200]  # carol's own limit


def test_the_middlewares_routes_limit_per_user_too(users: Configure, http: Http) -> None:
    users()
    login(http, "alice")
    assert statuses(http, "/routed", 4) == [200, 200, 200, 429]


def test_drf_token_authentication_names_the_user_to_the_throttle(users: Configure) -> None:
    users()
    http = Http("sync", None)
    token = Token.objects.create(user=User.objects.get(username="alice")).key
    statuses_alice = statuses(http, "/token-search", 4, Authorization=f"Token {token}")
    first = http.get("/token-search")

    assert statuses_alice == [200, 200, 200, 429]
    assert first.status_code == 200  # no token: an anonymous client, a new device
    assert "sentinel_device" in first.cookies


@pytest.mark.parametrize("routes", [{"GET token-routed": USER_POLICY}, {"*": USER_POLICY}])
def test_a_drf_view_the_middleware_guards_is_limited_per_drf_user(
    users: Configure, routes: dict[str, str]
) -> None:
    users(routes=routes)
    http = Http("sync", None)
    alice = Token.objects.create(user=User.objects.get(username="alice")).key
    bob = Token.objects.create(user=User.objects.get(username="bob")).key
    assert statuses(http, "/token-routed", 4, Authorization=f"Token {alice}") == [
        200,
        200,
        200,
        429,
    ]
    seen = http.get("/token-routed", Authorization=f"Token {bob}")
    assert (seen.status_code, seen.json()) == (200, {"user": "bob"})
    assert "sentinel_device" not in http.cookies
    refused = http.get("/token-routed", Authorization="Token not-a-token")
    assert refused.status_code == 401  # DRF's own answer; Sentinel saw an anonymous client
    assert "sentinel_device" not in refused.cookies  # not set on a refusal


def test_an_api_key_names_the_user_through_settings_identify(users: Configure, http: Http) -> None:
    users(identify=f"{VIEWS}.api_key")
    path = path_of(http)
    assert statuses(http, path, 4, X_API_KEY="key-of-acme-0123") == [200, 200, 200, 429]
    assert statuses(http, path, 1, X_API_KEY="key-of-globex-45") == [200]
    login(http, "alice")  # the session does not count: identify names the user
    assert "sentinel_device" in http.get(path).cookies


def test_settings_identify_and_denial_view_are_not_the_cores_keys(users: Configure) -> None:
    users(identify=f"{VIEWS}.api_key", denial_view=f"{VIEWS}.too_many")
    loaded = conf.load_settings()
    assert "identify" not in loaded
    assert "denial_view" not in loaded


@pytest.mark.parametrize(
    ("key", "value", "fragment"),
    [
        ("identify", f"{VIEWS}.nowhere", "settings.SENTINEL.identify: "),
        ("denial_view", f"{VIEWS}.NOT_CALLABLE", "settings.SENTINEL.denial_view: expected a"),
    ],
)
def test_a_hook_that_does_not_import_is_e001(
    users: Configure, key: str, value: str, fragment: str
) -> None:
    users(**{key: value})
    (message,) = check_settings()
    assert message.id == "sentinel.E001"
    assert message.msg.startswith(fragment)


# --- denials rendered by the app -----------------------------------------------------------


def test_the_denial_view_renders_a_429_with_the_headers(users: Configure, http: Http) -> None:
    users(denial_view=f"{VIEWS}.too_many")
    login(http, "alice")
    path = path_of(http)
    statuses(http, path, 3)
    denied = http.get(path)

    assert denied.status_code == 429
    assert denied.content == f"<h1>{USER_POLICY}: rate_limited</h1>".encode()
    assert denied.headers["Content-Type"].startswith("text/html")
    assert int(denied.headers["Retry-After"]) >= 1
    assert denied.headers["RateLimit"].startswith(f'"{USER_POLICY}";r=0;')
    assert denied.headers["RateLimit-Policy"].startswith(f'"{USER_POLICY}";q=3;')


def test_an_async_denial_view_renders_it_in_either_flavor(users: Configure, http: Http) -> None:
    users(denial_view=f"{VIEWS}.async_too_many")
    path = path_of(http)
    statuses(http, path, 3)
    denied = http.get(path)
    assert (denied.status_code, denied.content) == (429, b"async rate_limited")
    assert "Retry-After" in denied.headers


def test_the_denial_view_renders_a_drf_throttle_denial(users: Configure) -> None:
    users(denial_view=f"{VIEWS}.too_many")
    http = Http("sync", None)
    statuses(http, "/token-search", 3)
    denied = http.get("/token-search")
    assert denied.status_code == 429
    assert denied.content.startswith(b"<h1>")
    assert "RateLimit" in denied.headers


def test_the_denial_view_renders_a_503(users: Configure, http: Http, dead_redis_url: str) -> None:
    users(denial_view=f"{VIEWS}.too_many", redis_url=dead_redis_url)
    denied = http.get(path_of(http))
    assert (denied.status_code, denied.content) == (
        503,
        f"<h1>{USER_POLICY}: fail_closed</h1>".encode(),
    )


def test_a_denial_view_must_return_a_response(users: Configure) -> None:
    users(denial_view=f"{VIEWS}.not_a_response")
    http = Http("sync", None)
    statuses(http, "/search", 3)
    with pytest.raises(TypeError, match="returned str, not an HttpResponse"):
        http.get("/search")
