from django.urls import include, path

from . import views

sync = [
    path("tailor", views.tailor),
    path("ingest", views.ingest),
    path("login", views.login),
    path("cbv-method", views.IngestMethodDecorated.as_view()),
    path("cbv-class", views.IngestClassDecorated.as_view()),
    path("cbv-handler", views.IngestHandlerDecorated.as_view()),
    path("cbv-direct", views.IngestMethodDirect.as_view()),
    path("drf-class", views.DrfIngest.as_view()),
    path("drf-handler", views.DrfIngestHandlerDecorated.as_view()),
]
asynchronous = [
    path("tailor", views.atailor),
    path("ingest", views.aingest),
    path("login", views.alogin),
    path("cbv-class", views.AsyncIngestClassDecorated.as_view()),
    path("cbv-method", views.AsyncIngestMethodDecorated.as_view()),
    path("cbv-handler", views.AsyncIngestHandlerDecorated.as_view()),
    path("cbv-direct", views.AsyncIngestMethodDirect.as_view()),
]
urlpatterns = [
    path("v1/", include(sync)),
    path("async/", include(asynchronous)),
    path("items/<int:pk>", views.item),
    path("async-items/<int:pk>", views.aitem),
    path("open", views.unguarded),
]
