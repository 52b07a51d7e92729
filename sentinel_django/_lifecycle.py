"""The request lifecycle for Django, shared by the middleware and the decorator.

Both ask the core which endpoint ids a request pays for, admit it once (a request
already admitted on an id is never charged for it again), and complete the admission
with the final status: at once for a built response, when its body is done for a
streaming one, and as a 500 when the view raised.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Sequence
from typing import Any

from django.http import (  # type: ignore[import-untyped]
    HttpRequest,
    HttpResponseBase,
    StreamingHttpResponse,
)

from sentinel_core.adapter import CANCELLED, SERVER_ERROR, Admission, Outcome, ametered, metered

from . import conf
from ._translate import arendered_denial, decorate, rendered_denial, request_view
from .request_log import mark_denied

_ADMITTED = "_sentinel_admitted"
"""On the request: the endpoint ids it was admitted on."""
_ADMISSIONS = "_sentinel_admissions"
"""On the request: its admissions still to complete."""
OK = 200
_MIDDLEWARE = "_sentinel_middleware"
"""On the request: the middleware will finish it (a decorator leaves that to it)."""


_REFUSAL = "_sentinel_refusal"
"""On the request: Sentinel's answer to a request another layer refused for it (a DRF
throttle), which the middleware sends instead of that layer's own."""


def enter_middleware(request: HttpRequest) -> None:
    setattr(request, _MIDDLEWARE, True)


def in_middleware(request: HttpRequest) -> bool:
    return bool(getattr(request, _MIDDLEWARE, False))


def refuse(request: HttpRequest, response: HttpResponseBase) -> None:
    setattr(request, _REFUSAL, response)


def refusal(request: HttpRequest, response: HttpResponseBase) -> HttpResponseBase:
    """The response to send: Sentinel's own refusal when one was recorded."""
    recorded: HttpResponseBase | None = getattr(request, _REFUSAL, None)
    return response if recorded is None else recorded


def unpaid(request: HttpRequest, endpoint_ids: Iterable[str]) -> tuple[str, ...]:
    """The ids of ``endpoint_ids`` this request has not been admitted on yet."""
    admitted = getattr(request, _ADMITTED, ())
    return tuple(endpoint_id for endpoint_id in endpoint_ids if endpoint_id not in admitted)


def route_ids(
    request: HttpRequest, decorated: Sequence[str], default: bool = True, any_method: bool = False
) -> tuple[str, ...]:
    """The ids the request pays for: its view's decorators' and its ``routes`` entry's,
    or ``routes["*"]``'s when neither names one and ``default`` allows it. A view that
    answers ``any_method`` (a function view) pays every entry of its route for a
    method none of them names."""
    view = request_view(request)
    table = conf.runtime().sentinel.route_table
    return table.charged(
        view.method, (view.route,), decorated, default=default, any_method=any_method
    )


def admit(request: HttpRequest, endpoint_ids: Sequence[str]) -> HttpResponseBase | None:
    """Admit ``request``: the denial response, or None (the admission waits on the
    request for `finish`). With ``enabled = false``, None at once: nothing is decided."""
    runtime = conf.runtime()
    if not runtime.sentinel.config.enabled:
        return None
    runtime.ensure_started()
    admission = runtime.sentinel.admit(request_view(request), endpoint_ids)
    denied = _settle(request, endpoint_ids, admission)
    return None if denied is None else rendered_denial(runtime.denial_view, request, denied)


async def aadmit(request: HttpRequest, endpoint_ids: Sequence[str]) -> HttpResponseBase | None:
    """`admit` for async views and the async middleware."""
    runtime = conf.runtime()
    if not runtime.sentinel.config.enabled:
        return None
    await runtime.aensure_started()
    await runtime.aidentify(request, endpoint_ids)
    admission = await runtime.sentinel.aadmit(request_view(request), endpoint_ids)
    denied = _settle(request, endpoint_ids, admission)
    if denied is None:
        return None
    return await arendered_denial(runtime.denial_view, request, denied)


def finish(request: HttpRequest, response: HttpResponseBase) -> None:
    """Add the request's admissions' fields to ``response`` and complete them: now, or
    when a streaming body is done."""
    for admission in _decorate(request, response):
        admission.complete(response.status_code)


async def afinish(request: HttpRequest, response: HttpResponseBase) -> None:
    """`finish` on the event loop."""
    for admission in _decorate(request, response):
        await admission.acomplete(response.status_code)


def settle(request: HttpRequest, status: int) -> None:
    """Complete the request's admissions with ``status`` and no response to decorate:
    500 when the view raised, 200 when it returned something not a response."""
    for admission in _take(request):
        admission.complete(status)


async def asettle(request: HttpRequest, status: int) -> None:
    """`settle` on the event loop."""
    for admission in _take(request):
        await admission.acomplete(status)


def _take(request: HttpRequest) -> list[Admission]:
    """The request's admissions, forgotten with what it was admitted on: the request's
    passage is over."""
    admissions: list[Admission] = getattr(request, _ADMISSIONS, [])
    setattr(request, _ADMISSIONS, [])
    setattr(request, _ADMITTED, ())
    return admissions


def _decorate(request: HttpRequest, response: HttpResponseBase) -> list[Admission]:
    """Decorate ``response``; the admissions to complete now (none when the response
    streams: they complete when its body is done)."""
    admissions = _take(request)
    status = response.status_code
    decorate(response, admissions)
    if not isinstance(response, StreamingHttpResponse) or not admissions:
        return admissions
    wrapper = _ACompleteAfter if response.is_async else _CompleteAfter
    response.streaming_content = wrapper(response.streaming_content, admissions, status)
    return []


def serve(request: HttpRequest, endpoint_ids: Sequence[str], view: Callable[[], Any]) -> Any:
    """The lifecycle around a view called by a decorator; the middleware, when it is
    installed, finishes the request (and converts an exception into a 500) itself."""
    refused = admit(request, endpoint_ids)
    if refused is not None or in_middleware(request):
        return view() if refused is None else refused
    try:
        response = view()
    except BaseException:
        settle(request, SERVER_ERROR)
        raise
    if isinstance(response, HttpResponseBase):
        finish(request, response)
    else:
        settle(request, OK)
    return response


async def aserve(
    request: HttpRequest, endpoint_ids: Sequence[str], view: Callable[[], Awaitable[Any]]
) -> Any:
    """`serve` for async views."""
    refused = await aadmit(request, endpoint_ids)
    if refused is not None or in_middleware(request):
        return await view() if refused is None else refused
    try:
        response = await view()
    except BaseException:
        await asettle(request, SERVER_ERROR)
        raise
    if isinstance(response, HttpResponseBase):
        await afinish(request, response)
    else:
        await asettle(request, OK)
    return response


def _settle(
    request: HttpRequest, endpoint_ids: Sequence[str], admission: Admission
) -> Outcome | None:
    """The admission's denial, or None once the request is recorded as admitted."""
    if admission.denial is not None:
        mark_denied(request, admission.denial)
        return admission.denial
    setattr(request, _ADMITTED, (*getattr(request, _ADMITTED, ()), *endpoint_ids))
    setattr(request, _ADMISSIONS, [*getattr(request, _ADMISSIONS, []), admission])
    return None


class _CompleteAfter:
    """A streaming body that completes its request's admissions when it is done: at its
    end (the response's status), on an error (500), or when the server closes it before
    its end (the client went away). Django registers ``close`` as the response's closer,
    and calls it from a thread under ASGI, so completion here is always blocking."""

    def __init__(self, content: Any, admissions: Sequence[Admission], status: int) -> None:
        meter = next((a.meter for a in admissions if a.meter is not None), None)
        # A settle policy's body reports its units as it streams, wherever the server
        # iterates it (under ASGI, a thread that does not share the view's context).
        if meter is not None:
            content = ametered(content, meter) if self._is_async else metered(content, meter)
        self._content = content
        self._admissions = admissions
        self._status = status

    _is_async = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self._content
        except BaseException:
            self._complete(SERVER_ERROR)
            raise
        self._complete(self._status)

    def close(self) -> None:
        self._complete(CANCELLED)  # a no-op once the body was done

    def _complete(self, status: int) -> None:
        for admission in self._admissions:
            admission.complete(status)


class _ACompleteAfter(_CompleteAfter):
    """`_CompleteAfter` for an async streaming body (Django tells them apart by
    whether ``iter`` accepts the content)."""

    __iter__ = None  # type: ignore[assignment]
    _is_async = True

    async def __aiter__(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._content:
                yield chunk
        except BaseException:
            for admission in self._admissions:
                await admission.acomplete(SERVER_ERROR)
            raise
        for admission in self._admissions:
            await admission.acomplete(self._status)
