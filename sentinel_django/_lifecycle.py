"""The request lifecycle for Django, shared by the middleware, the decorator and the
DRF throttle.

Each admits the request on what it pays for, compiled once (`Charged`: a route's, a
decorator's, a throttle's), and never twice on one id; the admissions are completed
with the final status: at once for a built response, when its body is done for a
streaming one, and as a 500 when the view raised. What Sentinel keeps on a request is
one `Passage` object, made by the middleware or at the first admission.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import Any

from django.http import (  # type: ignore[import-untyped]
    HttpRequest,
    HttpResponseBase,
    StreamingHttpResponse,
)

from sentinel_core.adapter import (
    CANCELLED,
    SERVER_ERROR,
    Admission,
    Outcome,
    RequestView,
    ametered,
    metered,
)

from ._runtime import Charged, Runtime, charging
from ._translate import arendered_denial, decorate, rendered_denial, request_view
from .request_log import mark_denied

OK = 200
_PASSAGE = "_sentinel_passage"
"""On the request: its `Passage`."""


class Passage:
    """What Sentinel keeps on one request while it passes through."""

    __slots__ = ("admissions", "admitted", "middleware", "refusal", "refused", "view")

    def __init__(self, middleware: bool) -> None:
        self.middleware = middleware
        """The middleware will finish the request (a decorator leaves that to it)."""
        self.view: RequestView | None = None
        """The request as the core sees it, made at its first admission."""
        self.admitted: tuple[str, ...] = ()
        """The endpoint ids the request was admitted on."""
        self.admissions: list[Admission] = []
        """Its admissions still to complete."""
        self.refusal: HttpResponseBase | None = None
        """Sentinel's answer to a request another layer refused for it (a DRF throttle),
        which the middleware sends instead of that layer's own."""
        self.refused = False
        """A guard refused the request after others admitted it (a throttle or a
        decorator after the middleware, stacked decorators): its refusal carries the
        refusing policy's fields alone, as a refusal in one admission does."""

    def answer(self, response: HttpResponseBase) -> HttpResponseBase:
        """The response the middleware sends: Sentinel's own refusal when one was made."""
        return response if self.refusal is None else self.refusal


def enter_middleware(request: HttpRequest) -> Passage:
    passage = Passage(middleware=True)
    setattr(request, _PASSAGE, passage)
    return passage


def passage_of(request: HttpRequest) -> Passage:
    """The request's `Passage`, made now if nothing made it yet."""
    passage: Passage | None = getattr(request, _PASSAGE, None)
    if passage is None:
        passage = Passage(middleware=False)
        setattr(request, _PASSAGE, passage)
    return passage


def unpaid(passage: Passage, charged: Charged) -> Charged:
    """What of ``charged`` the request has not been admitted on yet."""
    admitted = passage.admitted
    if not admitted:
        return charged
    return charging(e for e in charged.endpoints if e.endpoint_id not in admitted)


def admit(
    request: HttpRequest, passage: Passage, runtime: Runtime, charged: Charged
) -> HttpResponseBase | None:
    """Admit ``request`` on ``charged`` (something, and nothing it was admitted on): the
    denial response, or None (the admission waits on the request's passage for `finish`).
    ``enabled`` is true: its callers serve the request untouched otherwise."""
    if not runtime.started:
        runtime.ensure_started()
    view = passage.view
    if view is None:  # the request's first admission: the core's view of it, for all
        view = passage.view = request_view(request)
    admission = runtime.sentinel.admit(view, charged.endpoints)
    if admission.denial is None:
        passage.admitted += charged.ids
        passage.admissions.append(admission)
        return None
    denial = _denied(request, passage, admission.denial)
    return rendered_denial(runtime.denial_view, request, denial)


async def aadmit(
    request: HttpRequest, passage: Passage, runtime: Runtime, charged: Charged
) -> HttpResponseBase | None:
    """`admit` for async views and the async middleware."""
    if not runtime.started:
        await runtime.aensure_started()
    if charged.names_user:
        await runtime.aidentify(request)
    view = passage.view
    if view is None:
        view = passage.view = request_view(request)
    admission = await runtime.sentinel.aadmit(view, charged.endpoints)
    if admission.denial is None:
        passage.admitted += charged.ids
        passage.admissions.append(admission)
        return None
    denial = _denied(request, passage, admission.denial)
    return await arendered_denial(runtime.denial_view, request, denial)


def _denied(request: HttpRequest, passage: Passage, denial: Outcome) -> Outcome:
    passage.view = None  # no admission follows a refusal (see `_take`)
    passage.refused = True
    mark_denied(request, denial)
    return denial


def finish(passage: Passage, response: HttpResponseBase) -> None:
    """Add the request's admissions' fields to ``response`` and complete them: now, or
    when a streaming body is done.

    When a guard refused the request after others admitted it, their admissions are
    withdrawn instead, untouched by the refusal: the view never ran (reservations go
    back, nothing is counted), and a refusal's fields are the refusing policy's alone
    (SPEC §4: an admitted policy's ``t`` may be shorter than the refusal's
    Retry-After, which a client waiting ``t`` would be refused again for)."""
    if passage.refused:
        for admission in _take(passage):
            admission.withdraw()
        return
    status = response.status_code
    for admission in _decorate(passage, response, status):
        admission.complete(status)


async def afinish(passage: Passage, response: HttpResponseBase) -> None:
    """`finish` on the event loop."""
    if passage.refused:
        for admission in _take(passage):
            await admission.awithdraw()
        return
    status = response.status_code
    for admission in _decorate(passage, response, status):
        await admission.acomplete(status)


def settle(passage: Passage, status: int) -> None:
    """Complete the request's admissions with ``status`` and no response to decorate:
    500 when the view raised, 200 when it returned something not a response."""
    for admission in _take(passage):
        admission.complete(status)


async def asettle(passage: Passage, status: int) -> None:
    """`settle` on the event loop."""
    for admission in _take(passage):
        await admission.acomplete(status)


def _take(passage: Passage) -> list[Admission]:
    """The request's admissions, forgotten with what it was admitted on: the request's
    passage is over. Its view goes too: it holds the request (``native``), and a request
    that holds it back could only be freed by the garbage collector."""
    admissions = passage.admissions
    passage.admissions, passage.admitted, passage.view = [], (), None
    return admissions


def _decorate(passage: Passage, response: HttpResponseBase, status: int) -> list[Admission]:
    """Decorate ``response`` (of status ``status``): the admissions to complete now
    (none when the response streams: they complete when its body is done)."""
    admissions = _take(passage)
    decorate(response, admissions, status)
    if not isinstance(response, StreamingHttpResponse):
        return admissions
    wrapper = _ACompleteAfter if response.is_async else _CompleteAfter
    response.streaming_content = wrapper(response.streaming_content, admissions, status)
    return []


def serve(
    request: HttpRequest,
    runtime: Runtime,
    charged: Charged,
    view: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """The lifecycle around a view called by a decorator; the middleware, when it is
    installed, finishes the request (and converts an exception into a 500) itself.

    A request another guard admitted first pays only for what it has not paid yet."""
    passage = passage_of(request)  # a guard inside the view finds it
    charged = unpaid(passage, charged)
    if charged.endpoints:
        refused = admit(request, passage, runtime, charged)
        if refused is not None:
            return refused
    if passage.middleware:
        return view(*args, **kwargs)
    try:
        response = view(*args, **kwargs)
    except BaseException:
        settle(passage, SERVER_ERROR)
        raise
    if isinstance(response, HttpResponseBase):
        finish(passage, response)
    else:
        settle(passage, OK)
    return response


async def aserve(
    request: HttpRequest,
    runtime: Runtime,
    charged: Charged,
    view: Callable[..., Awaitable[Any]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """`serve` for async views."""
    passage = passage_of(request)
    charged = unpaid(passage, charged)
    if charged.endpoints:
        refused = await aadmit(request, passage, runtime, charged)
        if refused is not None:
            return refused
    if passage.middleware:
        return await view(*args, **kwargs)
    try:
        response = await view(*args, **kwargs)
    except BaseException:
        await asettle(passage, SERVER_ERROR)
        raise
    if isinstance(response, HttpResponseBase):
        await afinish(passage, response)
    else:
        await asettle(passage, OK)
    return response


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
