"""OpenAPI: document the 429/503 (and 401) responses of every guarded operation.

Routes are usually declared after ``init_app``, so nothing can be registered on them
then; instead ``app.openapi`` is wrapped, and the responses are added to the generated
document once, when it is first built. Responses the app declares itself win.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI

from sentinel_core import IdentityKind, Sentinel

from ._routes import RouteIndex

PROBLEM_SCHEMA_NAME = "SentinelProblem"
_PROBLEM_JSON = "application/problem+json"
_PROBLEM_SCHEMA: dict[str, Any] = {
    "title": PROBLEM_SCHEMA_NAME,
    "description": "An RFC 9457 problem detail, as Sentinel answers a refused request.",
    "type": "object",
    "required": ["type", "title", "status", "detail"],
    "properties": {
        "type": {"type": "string", "format": "uri-reference"},
        "title": {"type": "string"},
        "status": {"type": "integer"},
        "detail": {"type": "string"},
        "violated-policies": {"type": "array", "items": {"type": "string"}},
    },
}
_RATELIMIT_HEADERS = {
    "RateLimit-Policy": {
        "description": "The endpoint's quota (IETF RateLimit header fields draft).",
        "schema": {"type": "string"},
    },
    "RateLimit": {
        "description": "What is left of the quota and when it resets.",
        "schema": {"type": "string"},
    },
}


def install_openapi(app: FastAPI, sentinel: Sentinel) -> None:
    """Wrap ``app.openapi`` so the generated document lists Sentinel's responses."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = generate()
            document(schema, RouteIndex.build(app.routes, sentinel.route_table), sentinel)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def document(schema: dict[str, Any], index: RouteIndex, sentinel: Sentinel) -> None:
    """Add the responses of each guarded operation of ``index`` to ``schema``."""
    paths: dict[str, Any] = schema.get("paths", {})
    documented = False
    for entry in index.entries:
        for method in entry.methods:
            policies = [
                sentinel.config.policies[endpoint_id]
                for endpoint_id in index.charged(entry, method)
                if endpoint_id in sentinel.config.policies
            ]
            operation = paths.get(entry.template, {}).get(method.lower())
            if policies and isinstance(operation, dict):
                tenant = any(policy.identity is IdentityKind.TENANT for policy in policies)
                responses = operation.setdefault("responses", {})
                for status, response in _responses(tenant):
                    responses.setdefault(status, response)
                documented = True
    if documented:
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        schemas.setdefault(PROBLEM_SCHEMA_NAME, _PROBLEM_SCHEMA)


def _responses(tenant: bool) -> Iterable[tuple[str, dict[str, Any]]]:
    yield (
        "429",
        _problem(
            "Too Many Requests: the endpoint's rate limit is exhausted.",
            {
                "Retry-After": {
                    "description": "Seconds to wait before the limit admits a request.",
                    "schema": {"type": "integer", "minimum": 1},
                },
                **_RATELIMIT_HEADERS,
            },
        ),
    )
    yield (
        "503",
        _problem(
            "Service Unavailable: the rate limiter's store is unavailable and this "
            "endpoint fails closed.",
            {
                "Retry-After": {
                    "description": "Seconds until the limiter retries its store, when known.",
                    "schema": {"type": "integer", "minimum": 1},
                }
            },
        ),
    )
    if tenant:
        yield (
            "401",
            _problem(
                "Unauthorized: a valid bearer token is required to identify the tenant.",
                {
                    "WWW-Authenticate": {
                        "description": "The Bearer challenge (RFC 6750).",
                        "schema": {"type": "string"},
                    }
                },
            ),
        )


def _problem(description: str, headers: dict[str, Any]) -> dict[str, Any]:
    return {
        "description": description,
        "headers": headers,
        "content": {
            _PROBLEM_JSON: {"schema": {"$ref": f"#/components/schemas/{PROBLEM_SCHEMA_NAME}"}}
        },
    }
