"""The example's URLconf: the route templates ``SENTINEL["routes"]`` refers to."""

import views
from django.urls import path

urlpatterns = [
    path("v1/tailor", views.tailor),
    path("v1/ingest", views.Ingest.as_view()),
    path("v1/login", views.login),
    path("health", views.health),
]
