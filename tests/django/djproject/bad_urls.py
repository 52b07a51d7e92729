"""A URLconf whose views name endpoint ids no policy declares (sentinel.E002), in every
place the system check must look."""

from django.http import HttpRequest, HttpResponse
from django.urls import include, path
from django.utils.decorators import method_decorator
from django.views import View
from rest_framework.response import Response
from rest_framework.viewsets import ViewSet

from sentinel_django import rate_limited

from . import views


@rate_limited("nope.function")
def unknown_function(request: HttpRequest) -> HttpResponse:
    return HttpResponse("never")


@rate_limited("nope.cbv_class")
class UnknownClass(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")


@method_decorator(rate_limited("nope.cbv_dispatch"), name="dispatch")
class UnknownDispatch(View):
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")


class UnknownHandler(View):
    @method_decorator(rate_limited("nope.cbv_handler"))
    def get(self, request: HttpRequest) -> HttpResponse:
        return HttpResponse("never")


class UnknownViewSet(ViewSet):
    @method_decorator(rate_limited("nope.viewset_action"))
    def list(self, request: object) -> Response:
        return Response([])


@rate_limited("nope.nested")
def nested(request: HttpRequest) -> HttpResponse:
    return HttpResponse("never")


UNKNOWN_IDS = {
    "nope.function",
    "nope.cbv_class",
    "nope.cbv_dispatch",
    "nope.cbv_handler",
    "nope.viewset_action",
    "nope.nested",
}

urlpatterns = [
    path("unknown-function", unknown_function),
    path("unknown-cbv-class", UnknownClass.as_view()),
    path("unknown-cbv-dispatch", UnknownDispatch.as_view()),
    path("unknown-cbv-handler", UnknownHandler.as_view()),
    path("unknown-viewset", UnknownViewSet.as_view({"get": "list"})),
    path("nested/", include([path("deeper", nested)])),
    path("known", views.ingest),
]
