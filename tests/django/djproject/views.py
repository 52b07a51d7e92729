"""Views of every shape ``@rate_limited`` supports, and undecorated ones for the middleware."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.views import APIView

from sentinel_django import rate_limited


def _ok(kind: str) -> JsonResponse:
    return JsonResponse({"ok": True, "view": kind})


@rate_limited("resumint.tailor")
def tailor(request: HttpRequest) -> HttpResponse:
    return _ok("function")


@rate_limited("pdftalk.ingest")
def ingest(request: HttpRequest) -> HttpResponse:
    return _ok("function")


@rate_limited("auth.login")
def login(request: HttpRequest) -> HttpResponse:
    return _ok("function")


@rate_limited("resumint.tailor")
async def atailor(request: HttpRequest) -> HttpResponse:
    return _ok("async")


@rate_limited("pdftalk.ingest")
async def aingest(request: HttpRequest) -> HttpResponse:
    return _ok("async")


@rate_limited("auth.login")
async def alogin(request: HttpRequest) -> HttpResponse:
    return _ok("async")


@method_decorator(rate_limited("pdftalk.ingest"), name="dispatch")
class IngestMethodDecorated(View):
    def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("cbv-method-decorator")


@rate_limited("pdftalk.ingest")
class IngestClassDecorated(View):
    def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("cbv-class")


class IngestHandlerDecorated(View):
    @method_decorator(rate_limited("pdftalk.ingest"))
    def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("cbv-handler")


@rate_limited("pdftalk.ingest")
class AsyncIngestClassDecorated(View):
    async def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("async-cbv-class")


@method_decorator(rate_limited("pdftalk.ingest"), name="dispatch")
class AsyncIngestMethodDecorated(View):
    async def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("async-cbv-method-decorator")


class AsyncIngestHandlerDecorated(View):
    # method_decorator keeps an async method async from Django 5.0 on.
    @method_decorator(rate_limited("pdftalk.ingest"))
    async def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("async-cbv-handler")


class IngestMethodDirect(View):
    @rate_limited("pdftalk.ingest")  # directly on a method: the request is found after self
    def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("cbv-method-direct")


class AsyncIngestMethodDirect(View):
    @rate_limited("pdftalk.ingest")  # works on every Django, unlike method_decorator here
    async def post(self, request: HttpRequest) -> HttpResponse:
        return _ok("async-cbv-method-direct")


@rate_limited("pdftalk.ingest")
class DrfIngest(APIView):
    def post(self, request: object) -> Response:
        return Response({"ok": True, "view": "drf-class"})


class DrfIngestHandlerDecorated(APIView):
    @method_decorator(rate_limited("pdftalk.ingest"))
    def post(self, request: object) -> Response:
        return Response({"ok": True, "view": "drf-handler"})


def item(request: HttpRequest, pk: int) -> HttpResponse:
    """Undecorated: ``routes`` guards POST (ingest) and GET/HEAD (tailor) through the
    middleware."""
    return _ok(f"item {pk}")


async def aitem(request: HttpRequest, pk: int) -> HttpResponse:
    return _ok(f"async item {pk}")


def unguarded(request: HttpRequest) -> HttpResponse:
    return _ok("unguarded")
