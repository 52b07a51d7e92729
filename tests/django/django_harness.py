"""What the Django suite's tests share besides fixtures: the two ways of sending requests."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from django.test import AsyncClient, Client

Configure = Callable[..., dict[str, Any]]
"""The ``configure`` fixture: installs ``settings.SENTINEL`` and returns it."""


class PeerAsyncClient(AsyncClient):  # type: ignore[misc]
    """``AsyncClient`` whose ASGI ``client`` address can be chosen per request (the
    public API only sets headers, and a peer address is not a header)."""

    peer = "127.0.0.1"

    def _base_scope(self, **request: Any) -> dict[str, Any]:
        scope: dict[str, Any] = super()._base_scope(**request)
        scope["client"] = [self.peer, 40000]
        return scope


class LoopRunner:
    """One event loop for a whole test, shut down like ``asyncio.run`` shuts its loop
    down (``asyncio.Runner`` without needing Python 3.11)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.loop.run_until_complete(coroutine)

    def close(self) -> None:
        try:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.run_until_complete(self.loop.shutdown_default_executor())
        finally:
            self.loop.close()


class Http:
    """One way of sending requests: the sync test ``Client`` to the sync views, or the
    ``AsyncClient`` to the async views on one event loop kept for the whole test."""

    def __init__(self, flavor: str, runner: LoopRunner | None) -> None:
        self.flavor = flavor
        self.prefix = "/v1" if flavor == "sync" else "/async"
        self._runner = runner
        self._sync = Client()
        self._async = PeerAsyncClient()

    def request(self, method: str, path: str, *, peer: str = "127.0.0.1", **headers: str) -> Any:
        """Send ``method path`` from ``peer`` with ``headers``; cookies persist."""
        if self._runner is None:
            send = getattr(self._sync, method.lower())
            return send(path, headers=headers, REMOTE_ADDR=peer)
        asend: Callable[..., Coroutine[Any, Any, Any]] = getattr(self._async, method.lower())
        self._async.peer = peer
        return self._runner.run(asend(path, headers=headers))

    def get(self, path: str, **kwargs: Any) -> Any:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> Any:
        return self.request("POST", path, **kwargs)

    def head(self, path: str, **kwargs: Any) -> Any:
        return self.request("HEAD", path, **kwargs)

    def force_login(self, user: Any) -> None:
        """Log ``user`` in with a session, as Django's test clients do."""
        (self._sync if self._runner is None else self._async).force_login(user)

    @property
    def cookies(self) -> Any:
        return (self._sync if self._runner is None else self._async).cookies
