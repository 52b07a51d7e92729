"""What the contract suite asks of an adapter: build an app from a configuration and
send it requests. One `Factory` per framework; a fourth adapter joins the contract by
adding its factory to `FACTORIES` (see ``conftest.py``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

import sentinel_core

USER_HEADER = "X-Contract-User"
"""Who the contract app's own auth says the user is (``identity: "user"`` policies)."""
DENIAL_VIEW = "tests.contract.django_urls.render_denial"
"""``denial_view`` in a contract config asks every factory's app to render denials
itself (SPEC §5): Django through this view, FastAPI and Flask with their own handlers,
all with the same body (`rendered`)."""


def contract_user(request: Any) -> str | None:
    """Every factory's ``identify``: the user named by `USER_HEADER`, if any."""
    user: str | None = request.headers.get(USER_HEADER)
    return user


def rendered(decision: Any) -> dict[str, str]:
    """The body of a denial the contract app renders itself."""
    return {"rendered": str(decision.reason), "endpoint": decision.endpoint_id}


def renders_denials(config: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """``config`` without ``denial_view`` (Django's key), and whether it was there."""
    return {k: v for k, v in config.items() if k != "denial_view"}, "denial_view" in config


class Refused(Exception):
    """The app refused to start (startup error, config error, system check error)."""


@dataclass
class Reply:
    status: int
    headers: Mapping[str, str]
    """Case-insensitive lookups; a field sent on several lines is joined with ", "."""
    body: bytes
    set_cookies: list[str] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        return self.headers.get(name.lower())


class Client(Protocol):
    core: sentinel_core.Sentinel
    """The app's core Sentinel: its policies, ``usage``, its metrics' ``registry``."""

    def request(
        self, method: str, path: str, *, headers: Mapping[str, str] | None = None
    ) -> Reply: ...

    def concurrently(
        self, requests: Sequence[tuple[str, str]], *, headers: Mapping[str, str] | None = None
    ) -> list[Reply]:
        """The requests at once, as the framework's servers run them (threads, or tasks
        of one event loop); the replies in the order of ``requests``."""

    def close(self) -> None: ...


class Factory(Protocol):
    name: str

    def build(self, config: Mapping[str, Any]) -> Client:
        """The contract app (`ENDPOINTS`) on ``config``, started.

        Raises:
            Refused: the app refuses to start with this configuration.
        """


def in_threads(
    client: Client, requests: Sequence[tuple[str, str]], headers: Mapping[str, str] | None
) -> list[Reply]:
    """`Client.concurrently` for a WSGI app: each request in a thread of a pool (a
    threaded server's workers)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda r: client.request(r[0], r[1], headers=headers), requests))


def spell_braces(template: str) -> str:
    return template


def spell_angles(template: str) -> str:
    """``/x/{item_id}`` as Flask and Django spell it: ``/x/<int:item_id>``."""
    return re.sub(r"\{(\w+)\}", r"<int:\1>", template)


def routes_for(config: Mapping[str, Any], spell: Callable[[str], str]) -> dict[str, Any]:
    """``config`` with its ``routes`` keys spelled the framework's way."""
    routes = {
        f"{key.split(' ', 1)[0]} {spell(key.split(' ', 1)[1])}": value
        for key, value in config.get("routes", {}).items()
    }
    return {**config, "routes": routes}


def lower_headers(pairs: list[tuple[str, str]]) -> dict[str, str]:
    headers: dict[str, str] = {}
    for name, value in pairs:
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


BAD_UNITS: dict[int, object] = {1: 1.5, 2: "3", 3: True, 4: -1}
"""What ``/report-bad/{kind}`` passes to ``sentinel_core.settle`` after reporting 3: a
float, a string, a bool (each a `TypeError`), a negative number (a `ValueError`)."""

RAISED: list[BaseException] = []
"""What ``sentinel_core.settle`` raised in ``/report-bad/{kind}`` handlers, in order (the
response is the framework's 500, which does not tell)."""

MIDWAY: list[Callable[[], object]] = []
"""What ``/report-midway/{units}`` handlers run after reporting (a test stops the store)."""


def report_bad(kind: int) -> None:
    """``/report-bad/{kind}``'s handler: reports 3, then `BAD_UNITS` ``[kind]``; records
    and re-raises what ``settle`` raised (a request without a settle policy raises at
    the first call)."""
    try:
        sentinel_core.settle(3)
        sentinel_core.settle(BAD_UNITS[kind])  # type: ignore[arg-type]
    except (TypeError, ValueError, RuntimeError) as exc:
        RAISED.append(exc)
        raise


def report_midway(units: int) -> None:
    """``/report-midway/{units}``'s handler: reports ``units``, then runs `MIDWAY`."""
    sentinel_core.settle(units)
    for action in MIDWAY:
        action()


ENDPOINTS = """
Every factory's app has these endpoints (templates in FastAPI's spelling):

POST /decorated            @rate_limited("small")
POST /same/{item_id}       @rate_limited("small"), and routes may name it
POST /different/{item_id}  @rate_limited("small"), and routes may name it
GET  /routed/{item_id}     undecorated, for routes
POST /login                @rate_limited("device") (anonymous)
GET  /inner/{status}       @rate_limited("device"), answers ``status`` itself (an
                           inner guard's 401/429)
POST /count/{status}       @rate_limited("failures"), answers ``status``
POST /raise                @rate_limited("failures"), raises
POST /refuse               @rate_limited("failures"), raises the framework's own HTTP
                           exception for a 403 (Flask ``abort``, FastAPI
                           ``HTTPException``, Django ``PermissionDenied``)
GET  /slot/{kind}          @rate_limited("slot") (one concurrency slot): raises
                           RuntimeError (kind 1) or the framework's 403 (kind 2)
GET  /stream               undecorated, a streamed body of 3 chunks, for routes
POST /usage/{units}        @rate_limited("usage") (a settle policy), an async handler
                           that reports ``units`` (``sentinel_core.settle``); Flask's
                           async view needs asgiref
POST /usage-sync/{units}   the same, a sync handler
GET  /usage-stream/{units} @rate_limited("usage"), 3 chunks streamed by a sync
                           generator reporting ``units`` each (FastAPI: Starlette's
                           thread pool; Flask: a bare generator)
GET  /usage-astream/{units} the same from an async generator (Flask: a generator with
                           stream_with_context; Django: an async view, a sync body)
GET  /usage-download/{units} the same as /usage-stream, its length (3) declared up front
                           (``Content-Length``): a download of known size
POST /usage-raise/{units}  @rate_limited("usage"), reports ``units``, then raises
POST /usage-count/{status} @rate_limited("usage.count") (settle, count ["4xx"]):
                           reports 7, answers ``status``
POST /report/{units}       undecorated (a ``routes`` entry names its policy), a sync
                           handler that reports ``units``
POST /report-bad/{kind}    undecorated, `report_bad`: a 500
POST /report-midway/{units} undecorated, `report_midway`
GET  /user                 @rate_limited("user") (the user `contract_user` names)
GET  /open                 never guarded
"""
