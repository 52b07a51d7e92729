"""The Django snippets of the docs (issue 27), read from the Markdown and run under
Django's test client: the Quick start's project (``"django-startproject"``, then
``"django-settings"`` appended to the settings ``startproject`` wrote and
``"django-urls"`` as its ``urls.py``) reaches its 429 with the headers the page shows,
CSRF checks enforced; the adapters' guide's DRF throttle (``"drf-throttle"``) and
``@exempt`` (``"django-exempt"``) do what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import jwt
import pytest
from django.test import Client, override_settings
from django.urls import path

from tests.support.adapter_config import COOKIE_SECRET, JWT_KEY
from tests.support.docs_config import guide_config
from tests.support.docs_snippets import quickstart_app, snippet


def run(code: str, **names: Any) -> dict[str, Any]:
    namespace: dict[str, Any] = {"__name__": "docs_snippet", **names}
    exec(compile(code, "<docs snippet>", "exec"), namespace)
    return namespace


def start_project(directory: Path) -> None:
    """``"django-startproject"`` as the page writes it, with this Python's Django."""
    command = snippet("quickstart.md", "django-startproject")
    environment = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    subprocess.run(command, shell=True, cwd=directory, env=environment, check=True, timeout=60)


def urlconf(monkeypatch: pytest.MonkeyPatch, name: str, *patterns: Any) -> str:
    module = types.ModuleType(name)
    module.urlpatterns = list(patterns)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, name, module)
    return name


def test_the_quickstart_project_answers_the_eleventh_request_with_a_429(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_JWT_KEY", JWT_KEY)
    monkeypatch.setenv("SENTINEL_COOKIE_SECRET", COOKIE_SECRET)
    start_project(tmp_path)
    settings_file = tmp_path / "mysite" / "settings.py"
    project_settings = settings_file.read_text(encoding="utf-8")
    project_settings += "\n" + quickstart_app("django-settings", redis_url)
    settings = run(project_settings, __file__=str(settings_file))
    (tmp_path / "mysite" / "urls.py").write_text(snippet("quickstart.md", "django-urls"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mysite", raising=False)
    monkeypatch.delitem(sys.modules, "mysite.urls", raising=False)
    token = jwt.encode({"sub": "tenant-42", "exp": int(time.time()) + 3600}, JWT_KEY, "HS256")
    with override_settings(
        INSTALLED_APPS=settings["INSTALLED_APPS"],
        MIDDLEWARE=settings["MIDDLEWARE"],
        SENTINEL=settings["SENTINEL"],
        ROOT_URLCONF="mysite.urls",
    ):
        assert "django.middleware.csrf.CsrfViewMiddleware" in settings["MIDDLEWARE"]
        client = Client(enforce_csrf_checks=True)
        responses = [
            client.post("/v1/ingest", headers={"Authorization": f"Bearer {token}"})
            for _ in range(11)
        ]
        login = client.post("/v1/login")
    assert [r.status_code for r in responses] == [200] * 10 + [429]
    assert responses[0].json() == {"status": "accepted"}
    denied = responses[-1]
    assert int(denied["Retry-After"]) >= 1
    assert denied["RateLimit-Policy"].startswith('"pdftalk.ingest";q=10;w=60;')
    assert denied["RateLimit"].startswith('"pdftalk.ingest";r=0;')
    assert denied["Content-Type"] == "application/problem+json"
    assert login.status_code == 200
    assert login["RateLimit-Policy"].startswith('"auth.login";')


def test_the_guides_drf_throttle_limits_its_view(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = run(snippet("adapters.md", "drf-throttle"))["Export"]
    name = urlconf(monkeypatch, "docs_drf_urls", path("export", export.as_view()))
    with override_settings(SENTINEL=guide_config(redis_url), ROOT_URLCONF=name):
        client = Client()
        responses = [client.get("/export") for _ in range(3)]
    assert [r.status_code for r in responses] == [200, 200, 429]
    assert responses[0]["RateLimit-Policy"].startswith('"reports.export";')


def test_the_guides_exempt_health_check_is_never_limited(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    health = run(snippet("adapters.md", "django-exempt"))["health"]
    name = urlconf(monkeypatch, "docs_exempt_urls", path("health", health))
    with override_settings(SENTINEL=guide_config(redis_url), ROOT_URLCONF=name):
        client = Client()
        responses = [client.get("/health") for _ in range(4)]
    assert [r.status_code for r in responses] == [200] * 4
    assert all(not r.has_header("RateLimit") for r in responses)
