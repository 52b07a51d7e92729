"""A request's passage through Sentinel: admission before the handler, completion after.

Every adapter drives the same two steps::

    admission = sentinel.admit(view, endpoint_ids)      # or: await sentinel.aadmit(...)
    if admission.denial is not None:
        answer admission.denial (status, headers, problem body); the handler never runs
    else:
        run the handler; add admission.headers(status) and admission.cookie(status)
        to its response; then, once the response is over,
        admission.complete(status)                      # or: await admission.acomplete(...)

``complete`` is called exactly once per admitted request with the final status: the
handler's, 500 when it raised, for a streaming response when its body is done, and
`CANCELLED` (499) when the request was cancelled or the client went away. It is where
``count`` policies consume, where ``settle`` policies are settled at the units the
handler reported (`sentinel_core.settle`, see `_meter`) and where concurrency leases
are released; calling it again does nothing. A denied admission settles its own
charges before it returns.

An adapter that admits one request in two steps (a guard inside the view after the
middleware's, say) calls ``withdraw`` instead of ``complete`` on the first admission
when the second is refused: the handler never ran, so it ends as a refusal within one
admission does (reservations refunded, leases back, nothing counted).

The rules are written once, as generators that yield `Step`s (what to ask the store)
and receive `Decision`s; `Sentinel.admit` drives them with blocking calls and
`Sentinel.aadmit` with awaits, so the sync and async paths cannot drift.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sentinel_core._models import STORE_VERDICTS, Decision, Policy, frozen_builder
from sentinel_core.decision._endpoint import Endpoint
from sentinel_core.http._meter import Meter, open_meter
from sentinel_core.http._outcome import EXEMPT, Cookie, HttpLayer, Outcome, Prepared, RequestView
from sentinel_core.identity._keys import AnonymousIdentity, Identity

T = TypeVar("T")

CANCELLED = 499
"""The status `complete` is given for a request cancelled or abandoned by its client
(nginx's "client closed request"): a 4xx, so ``count: ["4xx"]`` counts it."""

SERVER_ERROR = 500
"""The status `complete` is given when the handler raised."""

_LIST_FIELDS = ("RateLimit-Policy", "RateLimit")
"""Structured-field Lists (RFC 8941 §3.1): several outcomes' members join into one field."""

_REFUSALS = frozenset({401, 403, 429, 503})
"""Statuses that refuse the request (another guard's 401 or 429 included): no device
cookie, or a client would get a fresh identity for free on every refused request."""


class StepKind(str, enum.Enum):
    EVALUATE = "evaluate"
    """Decide and consume (`Sentinel.evaluate`); answered with the `Decision`."""
    CHECK = "check"
    """Decide without consuming (`Sentinel.precheck`): the check before the handler of
    a ``count`` policy; answered with the `Decision`."""
    RELEASE = "release"
    """Hand back a concurrency lease (`Sentinel.release`); answered with None."""
    SETTLE = "settle"
    """Settle a ``settle`` policy's reservation at ``units`` (a refund or an excess,
    nothing when they are what was reserved); answered with None."""


@dataclass(frozen=True, slots=True)
class Step:
    """One store call a lifecycle conversation asks its driver to make."""

    kind: StepKind
    endpoint_id: str
    identity: Identity
    request: RequestView | None = None
    decision: Decision | None = None
    """What a RELEASE step hands back the lease of, or a SETTLE step settles."""
    units: int = 0
    """The units a SETTLE step charges instead of the reservation."""


@dataclass(frozen=True, slots=True)
class Charge:
    """One endpoint id an admitted request pays for, kept until its completion."""

    policy: Policy
    identity: Identity
    outcome: Outcome


build_charge = frozen_builder(Charge)
"""`Charge`, built as fast as a plain class (one per request)."""


Conversation = Generator[Step, Any, T]


class Admission:
    """The admission of one request and, once the handler is done, its completion."""

    __slots__ = (
        "_alone",
        "_completed",
        "_cookie",
        "_fields",
        "_run",
        "charges",
        "denial",
        "meter",
        "request",
    )

    def __init__(
        self,
        request: RequestView,
        charges: Sequence[Charge],
        denial: Outcome | None,
        run: _Runner,
    ) -> None:
        self.request = request
        self.charges = charges = tuple(charges)
        self.denial = denial
        """The response to answer instead of running the handler (401, 429, 503)."""
        self._run = run
        self.meter: Meter | None = None
        """Where the handler's `sentinel_core.settle` calls add up (settle policies)."""
        self._alone: Charge | None = None
        # The response's fields, made once: every charge's outcome joined.
        fields: Sequence[tuple[str, str]]
        if len(charges) == 1:  # the usual case, without the joining
            outcome = charges[0].outcome
            fields, self._cookie = outcome.headers, outcome.cookie
            owes = _owes_completion(charges[0])
        else:
            outcomes = self.outcomes
            fields = join_fields(outcomes)
            self._cookie = next((o.cookie for o in outcomes if o.cookie is not None), None)
            owes = any(map(_owes_completion, charges))
        self._fields = fields
        # Nothing to tell the store after the handler: no count, no lease (the usual case).
        self._completed = denial is not None or not owes
        if not self._completed and any(map(_settles, charges)):
            self.meter = open_meter()
            if len(charges) == 1 and charges[0].policy.count is None:
                # The usual settle request: settled directly, with no conversation.
                self._alone = charges[0]

    @property
    def allowed(self) -> bool:
        return self.denial is None

    @property
    def owes_completion(self) -> bool:
        """Whether `complete` (or `withdraw`) still has something to tell the store (a
        ``count`` policy's consumption, a lease, a settlement). When it has not (a
        denial, the usual allowed request, an admission already completed), an adapter
        need not watch for the end of the response nor take a completion step."""
        return not self._completed

    @property
    def outcomes(self) -> tuple[Outcome, ...]:
        return tuple(charge.outcome for charge in self.charges)

    def headers(self, status: int) -> list[tuple[str, str]]:
        """The RateLimit fields to add to the handler's response (status ``status``):
        one ``RateLimit-Policy`` and one ``RateLimit`` whose list members are every
        charged policy's, in the order they were decided."""
        return list(self._fields)

    def cookie(self, status: int) -> Cookie | None:
        """The new device cookie to set, only on a response that does not refuse."""
        return None if status in _REFUSALS else self._cookie

    def complete(self, status: int) -> None:
        """The completion step (blocking store calls); see the module docstring."""
        if self._completed:
            return
        self._completed = True
        alone = self._alone
        if alone is not None:
            decision = alone.outcome.decision
            # A charge was decided; a settle charge's request has a meter.
            assert decision is not None
            assert self.meter is not None
            self._run.settler.settle(decision, alone.identity, self.meter.close())
            return
        drive(completion(self, status), self._run.sync)

    async def acomplete(self, status: int) -> None:
        """`complete` for asyncio servers."""
        if self._completed:
            return
        self._completed = True
        alone = self._alone
        if alone is not None:
            decision = alone.outcome.decision
            assert decision is not None
            assert self.meter is not None
            await self._run.settler.asettle(decision, alone.identity, self.meter.close())
            return
        await adrive(completion(self, status), self._run.async_)

    def withdraw(self) -> None:
        """End an admission whose handler will not run after all (a later guard of the
        same request refused it): instead of `complete`; see the module docstring."""
        if self._completed:
            return
        self._completed = True
        drive(withdrawal(self), self._run.sync)

    async def awithdraw(self) -> None:
        """`withdraw` for asyncio servers."""
        if self._completed:
            return
        self._completed = True
        await adrive(withdrawal(self), self._run.async_)


@dataclass(frozen=True, slots=True)
class _Runner:
    """How a driver makes each kind of step: the facade's sync and async calls."""

    sync: Callable[[Step], Any]
    async_: Callable[[Step], Awaitable[Any]]
    settler: Settler


class Settler(Protocol):
    """How a runner settles a reservation (`Settlement`); ``used`` None: what it reserved."""

    def settle(self, decision: Decision, identity: Identity, used: int | None) -> None: ...

    async def asettle(self, decision: Decision, identity: Identity, used: int | None) -> None: ...


def response_fields(
    admissions: Sequence[Admission], status: int
) -> tuple[list[tuple[str, str]], Cookie | None]:
    """The headers and device cookie one response carries for every admission of its
    request (an adapter may admit a request in two steps): RateLimit fields joined, the
    cookie only when ``status`` does not refuse the request."""
    if len(admissions) == 1:
        return admissions[0].headers(status), admissions[0].cookie(status)
    outcomes = [outcome for admission in admissions for outcome in admission.outcomes]
    cookies = [outcome.cookie for outcome in outcomes if outcome.cookie is not None]
    cookie = cookies[0] if cookies and status not in _REFUSALS else None
    return join_fields(outcomes), cookie


def join_fields(outcomes: Sequence[Outcome]) -> list[tuple[str, str]]:
    """The headers of several allowed outcomes as one response's: the members of each
    RateLimit field joined into one List, any other header kept as it is."""
    members: dict[str, list[str]] = {}
    other: list[tuple[str, str]] = []
    for outcome in outcomes:
        for name, value in outcome.headers:
            if name in _LIST_FIELDS:
                members.setdefault(name, []).append(value)
            else:
                other.append((name, value))
    return [(name, ", ".join(values)) for name, values in members.items()] + other


def answered(request: RequestView, outcome: Outcome, run: _Runner) -> Admission:
    """The admission of a request answered before any decision: exempt (the handler runs,
    nothing charged) or refused (a 401)."""
    return Admission(request, (), None if outcome is EXEMPT else outcome, run)


def decided(
    request: RequestView, policy: Policy, identity: Identity, outcome: Outcome, run: _Runner
) -> Admission:
    """The admission of a request on one endpoint id, by the outcome of its decision."""
    if not outcome.allowed:
        return Admission(request, (), outcome, run)
    return Admission(request, (build_charge(policy, identity, outcome),), None, run)


def admission(
    http: HttpLayer, request: RequestView, endpoints: Sequence[Endpoint]
) -> Conversation[tuple[list[Charge], Outcome | None]]:
    """Admit ``request`` on ``endpoints``: every identity first (a 401 costs no store
    call), then one decision per endpoint in order, stopping at the first denial."""
    prepared: list[tuple[Policy, Prepared]] = []
    cookie: Cookie | None = None
    minted: str | None = None
    for endpoint in endpoints:
        policy = endpoint.policy
        found = http.prepare(policy, request)
        if found is EXEMPT:
            continue  # never limited for this id: nothing to decide or charge
        if not isinstance(found, Prepared):
            return [], found
        identity = found.identity
        if found.cookie is not None and isinstance(identity, AnonymousIdentity):
            # No cookie: every anonymous policy charges the network's new devices and
            # the one device minted first, whose cookie the response sets.
            if cookie is None:
                cookie, minted = found.cookie, identity.minted
            else:
                found = Prepared(dataclasses.replace(identity, minted=minted), cookie)
        prepared.append((policy, found))
    charges: list[Charge] = []
    for policy, found in prepared:
        # A `count` policy is only checked now; it consumes at completion, by status.
        # A `settle` policy reserves now, whatever its `count`: an uncounted status
        # refunds the reservation at completion.
        kind = StepKind.EVALUATE if policy.count is None or policy.settle else StepKind.CHECK
        decision = yield Step(kind, policy.endpoint_id, found.identity, request)
        outcome = http.outcome(decision, cookie)
        if not outcome.allowed:
            # The handler will not run: the reservations made so far are refunded and
            # the leases taken so far go back now.
            yield from _settlements(charges, 0)
            yield from _releases(charges)
            return [], outcome
        charges.append(Charge(policy, found.identity, outcome))
    return charges, None


def completion(admitted: Admission, status: int) -> Conversation[None]:
    """What the store must hear once the handler is done with status ``status``: a
    ``count`` policy consumes when ``status`` is one it counts (a response already
    sent is never taken back, so a bucket spent meanwhile just stays spent), and every
    concurrency lease goes back, whatever the status.

    A check the decision table answered (the store was unavailable: the emergency
    limiter admitted the request, or a shadow policy let it through) has already
    charged and reported what it could: its request is not charged again.

    A ``settle`` policy is settled at the units the request reported (its reservation
    when it reported nothing), or at 0 when ``status`` is not one its ``count`` counts."""
    used = None if admitted.meter is None else admitted.meter.close()
    for charge in admitted.charges:
        counted = charge.policy.count
        if charge.policy.settle:
            units = 0 if counted is not None and status not in counted else used
            yield from _settlements((charge,), units)
        elif counted is not None and status in counted and _checked_by_store(charge):
            yield Step(
                StepKind.EVALUATE, charge.policy.endpoint_id, charge.identity, admitted.request
            )
    yield from _releases(admitted.charges)


def withdrawal(admitted: Admission) -> Conversation[None]:
    """What the store must hear of an admission whose handler never ran: what a denial
    within one admission does to the charges made before it (`admission`)."""
    if admitted.meter is not None:
        admitted.meter.close()
    yield from _settlements(admitted.charges, 0)
    yield from _releases(admitted.charges)


_settles = operator.attrgetter("policy.settle")
"""Whether a charge is a ``settle`` policy's reservation (in C: one per request)."""


def _owes_completion(charge: Charge) -> bool:
    """Whether the store must hear of ``charge`` after the handler: a ``count`` policy
    consumes then, a concurrency lease goes back then."""
    decision = charge.outcome.decision
    policy = charge.policy
    return (
        policy.count is not None
        or policy.settle
        or (decision is not None and decision.lease is not None)
    )


def _checked_by_store(charge: Charge) -> bool:
    decision = charge.outcome.decision
    assert decision is not None  # a charge is an admission: it has its decision
    return decision.reason in STORE_VERDICTS


def _settlements(charges: Sequence[Charge], used: int | None) -> Conversation[None]:
    """Settle the reservations of ``charges``' settle policies at ``used`` units (None:
    at what each reserved, which costs no store call)."""
    for charge in charges:
        decision = charge.outcome.decision
        if charge.policy.settle and decision is not None:
            units = decision.policy.cost if used is None else used
            yield Step(
                StepKind.SETTLE, decision.endpoint_id, charge.identity, None, decision, units
            )


def _releases(charges: Sequence[Charge]) -> Conversation[None]:
    for charge in charges:
        decision = charge.outcome.decision
        if decision is not None and decision.lease is not None:
            yield Step(StepKind.RELEASE, decision.endpoint_id, charge.identity, decision=decision)


def drive(conversation: Conversation[T], run: Callable[[Step], Any]) -> T:
    """Run ``conversation`` with blocking store calls."""
    try:
        step = next(conversation)
        while True:
            step = conversation.send(run(step))
    except StopIteration as done:
        result: T = done.value
        return result


async def adrive(conversation: Conversation[T], run: Callable[[Step], Awaitable[Any]]) -> T:
    """Run ``conversation`` with awaited store calls."""
    try:
        step = next(conversation)
        while True:
            step = conversation.send(await run(step))
    except StopIteration as done:
        result: T = done.value
        return result


class Facade(Protocol):
    """The calls of `Sentinel` a runner makes the steps with."""

    def evaluate(self, endpoint_id: str, identity: Identity, request: Any = None) -> Decision: ...

    async def aevaluate(
        self, endpoint_id: str, identity: Identity, request: Any = None
    ) -> Decision: ...

    def precheck(self, endpoint_id: str, identity: Identity, request: Any = None) -> Decision: ...

    async def aprecheck(
        self, endpoint_id: str, identity: Identity, request: Any = None
    ) -> Decision: ...

    def release(self, decision: Decision) -> None: ...

    async def arelease(self, decision: Decision) -> None: ...


def make_runner(facade: Facade, settler: Settler) -> _Runner:
    """The runner that makes each step through ``facade`` (settlements: ``settler``)."""

    def sync(step: Step) -> Decision | None:
        if step.kind is StepKind.RELEASE:
            assert step.decision is not None
            facade.release(step.decision)
            return None
        if step.kind is StepKind.SETTLE:
            assert step.decision is not None
            settler.settle(step.decision, step.identity, step.units)
            return None
        if step.kind is StepKind.CHECK:
            return facade.precheck(step.endpoint_id, step.identity, step.request)
        return facade.evaluate(step.endpoint_id, step.identity, step.request)

    async def async_(step: Step) -> Decision | None:
        if step.kind is StepKind.RELEASE:
            assert step.decision is not None
            await facade.arelease(step.decision)
            return None
        if step.kind is StepKind.SETTLE:
            assert step.decision is not None
            await settler.asettle(step.decision, step.identity, step.units)
            return None
        if step.kind is StepKind.CHECK:
            return await facade.aprecheck(step.endpoint_id, step.identity, step.request)
        return await facade.aevaluate(step.endpoint_id, step.identity, step.request)

    return _Runner(sync, async_, settler)
