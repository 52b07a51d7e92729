"""The contract suite's fixture: each test once per adapter, through its factory."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from tests.contract.apps_django import DjangoFactory
from tests.contract.apps_fastapi import FastApiFactory
from tests.contract.apps_flask import FlaskFactory
from tests.contract.harness import Client, Factory

FACTORIES: list[Factory] = [FastApiFactory(), FlaskFactory(), DjangoFactory()]
"""A fourth adapter gets the whole contract by adding its factory here."""

Build = Callable[[Mapping[str, Any]], Client]


@pytest.fixture(params=FACTORIES, ids=lambda factory: factory.name)
def build(request: pytest.FixtureRequest) -> Iterator[Build]:
    """``build(config)``: the adapter's contract app on ``config``, started; closed
    after the test."""
    factory: Factory = request.param
    clients: list[Client] = []

    def make(config: Mapping[str, Any]) -> Client:
        client = factory.build(config)
        clients.append(client)
        return client

    yield make
    for client in reversed(clients):
        client.close()
