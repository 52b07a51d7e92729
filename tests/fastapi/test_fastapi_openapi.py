"""OpenAPI: guarded operations document 429/503 (and 401 for tenant policies) with the
problem+json schema; the handlers' own parameters, dependencies, models and docs stay."""

from __future__ import annotations

import inspect
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry
from pydantic import BaseModel

from sentinel_fastapi import Sentinel, rate_limited
from tests.fastapi.apps import MakeApp
from tests.fastapi.conftest import client
from tests.support.adapter_config import bearer, spec_config

PROBLEM_REF = {"$ref": "#/components/schemas/SentinelProblem"}


async def openapi_of(app: FastAPI) -> dict[str, Any]:
    async with client(app) as http:
        response = await http.get("/openapi.json")
    assert response.status_code == 200
    document: dict[str, Any] = response.json()
    return document


def problem_schema(responses: dict[str, Any], status: str) -> Any:
    return responses[status]["content"]["application/problem+json"]["schema"]


async def test_tenant_operations_document_429_503_and_401_with_the_problem_schema(
    make_app: MakeApp,
) -> None:
    document = await openapi_of(make_app(spec_config("memory://")))

    for path in ("/v1/tailor", "/v1/ingest", "/v1/ingest-sync", "/v1/docs/{doc_id}/tailor"):
        responses = document["paths"][path]["post"]["responses"]
        assert {"429", "503", "401"} <= responses.keys(), path
        for status in ("429", "503", "401"):
            assert problem_schema(responses, status) == PROBLEM_REF
    tailor = document["paths"]["/v1/tailor"]["post"]["responses"]
    assert tailor["429"]["headers"]["Retry-After"]["schema"]["type"] == "integer"
    assert "WWW-Authenticate" in tailor["401"]["headers"]
    schema = document["components"]["schemas"]["SentinelProblem"]
    assert set(schema["required"]) == {"type", "title", "status", "detail"}


async def test_anonymous_operations_have_no_401_and_unguarded_ones_nothing(
    make_app: MakeApp,
) -> None:
    document = await openapi_of(make_app(spec_config("memory://")))

    login = document["paths"]["/auth/login"]["post"]["responses"]
    assert {"429", "503"} <= login.keys()
    assert "401" not in login
    assert document["paths"]["/health"]["get"]["responses"].keys() == {"200"}
    assert "429" not in document["paths"]["/v1/docs/{doc_id}"]["post"]["responses"]


async def test_routes_guarded_by_the_middleware_are_documented_too(make_app: MakeApp) -> None:
    routes = {"POST /v1/docs/{doc_id}": "pdftalk.ingest", "GET /v1/items/{item_id}": "auth.login"}
    document = await openapi_of(make_app(spec_config("memory://", routes=routes)))

    docs = document["paths"]["/v1/docs/{doc_id}"]["post"]["responses"]
    assert {"429", "503", "401"} <= docs.keys()
    items = document["paths"]["/v1/items/{item_id}"]["get"]["responses"]
    assert {"429", "503"} <= items.keys()
    assert "401" not in items


async def test_the_handlers_parameters_dependencies_model_and_docs_are_kept(
    make_app: MakeApp,
) -> None:
    document = await openapi_of(make_app(spec_config("memory://")))

    tailor = document["paths"]["/v1/tailor"]["post"]
    assert [parameter["name"] for parameter in tailor["parameters"]] == ["style"]
    assert tailor["summary"] == "Tailor a resume"
    assert tailor["description"] == "Tailor the resume to a job description."
    assert tailor["operationId"] == "tailor_v1_tailor_post"
    ok = tailor["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/Tailored"}
    doc = document["paths"]["/v1/docs/{doc_id}/tailor"]["post"]
    assert [(p["name"], p["in"]) for p in doc["parameters"]] == [("doc_id", "path")]


async def test_responses_the_app_declares_itself_are_not_overwritten() -> None:
    app = FastAPI()
    Sentinel(spec_config("memory://"), registry=CollectorRegistry()).init_app(app)

    @app.post("/v1/ingest", responses={429: {"description": "Slow down, ours"}})
    @rate_limited("pdftalk.ingest")
    async def ingest() -> None: ...

    responses = (await openapi_of(app))["paths"]["/v1/ingest"]["post"]["responses"]
    assert responses["429"]["description"] == "Slow down, ours"
    assert "503" in responses


def test_the_wrapper_keeps_the_handlers_signature_plus_a_hidden_keyword_parameter() -> None:
    async def handler(doc_id: int, *, style: str = "plain") -> dict[str, str]:
        """Docs."""
        return {}

    wrapped = rate_limited("pdftalk.ingest")(handler)
    parameters = inspect.signature(wrapped).parameters
    assert list(parameters)[:2] == ["doc_id", "style"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters.values())[1:])
    assert len(parameters) == 3
    assert wrapped.__name__ == "handler"
    assert wrapped.__doc__ == "Docs."
    # String annotations (this module has `from __future__ import annotations`) come
    # evaluated in the handler's module: older FastAPI reads them in the wrapper's.
    evaluated = inspect.signature(handler, eval_str=True)
    assert inspect.signature(wrapped).return_annotation == evaluated.return_annotation
    assert parameters["doc_id"].annotation is int


class Payload(BaseModel):
    text: str


async def test_a_body_model_of_the_handlers_module_stays_a_validated_body() -> None:
    app = FastAPI()
    Sentinel(spec_config("memory://"), registry=CollectorRegistry()).init_app(app)

    @app.post("/v1/ingest")
    @rate_limited("pdftalk.ingest")
    async def ingest(payload: Payload) -> Payload:
        return payload

    body = (await openapi_of(app))["paths"]["/v1/ingest"]["post"]["requestBody"]
    assert body["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Payload"}
    headers = {"Authorization": bearer("acme")}
    async with client(app) as http:
        echoed = await http.post("/v1/ingest", json={"text": "hi"}, headers=headers)
        invalid = await http.post("/v1/ingest", json={"txt": "hi"}, headers=headers)
    assert echoed.json() == {"text": "hi"}
    assert invalid.status_code == 422
