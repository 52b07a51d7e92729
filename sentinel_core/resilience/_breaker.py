"""The per-process circuit breaker guarding the Redis boundary (SPEC §3).

Everything that affects the breaker's state lives in this module; the transitions are
one table. The breaker never does I/O and never sleeps: time is an injected monotonic
clock, so tests drive it instead of waiting.

    CLOSED --(failure_threshold consecutive failures)--> OPEN
    OPEN --(open_seconds elapsed)--> HALF_OPEN
    HALF_OPEN --(a probe succeeds)--> CLOSED
    HALF_OPEN --(a probe fails)--> OPEN, with a fresh quarantine

An idle process's breaker does not stay OPEN for want of traffic (SPEC §3): every
reading of `state` past the quarantine moves it to HALF_OPEN first, and an OPEN breaker
asks its scheduler to wake it when the quarantine ends (by default a daemon timer
thread, one per opening, holding the breaker only weakly), so the transition is
reported, the gauge and its multiprocess file included, even if nothing reads the state.

Concurrency: one lock guards the state; it is never held across I/O, so it is safe for
threads (Flask, Django) and for asyncio tasks (FastAPI) alike. Every call gets a
`Permit` stamped with the breaker's generation; a result reported for an older
generation (a call that started before the last transition) is ignored, so a burst of
concurrent failures opens the breaker once, and a stale success cannot close it.
The listener is called outside the state lock, yet sees the transitions in the order
they happened: they are queued under the state lock and delivered, one at a time, by
whichever thread fired one (a gauge set to the last ``current`` stays true).
"""

from __future__ import annotations

import enum
import functools
import math
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class BreakerState(enum.IntEnum):
    """Values are those of the ``sentinel_breaker_state`` gauge (SPEC §7)."""

    CLOSED = 0
    OPEN = 1
    HALF_OPEN = 2

    def __str__(self) -> str:
        return self.name.lower()


class _Event(enum.Enum):
    THRESHOLD_REACHED = "threshold_reached"
    QUARANTINE_ELAPSED = "quarantine_elapsed"
    PROBE_SUCCEEDED = "probe_succeeded"
    PROBE_FAILED = "probe_failed"


_TRANSITIONS: dict[tuple[BreakerState, _Event], BreakerState] = {
    (BreakerState.CLOSED, _Event.THRESHOLD_REACHED): BreakerState.OPEN,
    (BreakerState.OPEN, _Event.QUARANTINE_ELAPSED): BreakerState.HALF_OPEN,
    (BreakerState.HALF_OPEN, _Event.PROBE_SUCCEEDED): BreakerState.CLOSED,
    (BreakerState.HALF_OPEN, _Event.PROBE_FAILED): BreakerState.OPEN,
}

TransitionListener = Callable[[BreakerState, BreakerState], None]
Scheduler = Callable[[float, Callable[[], None]], None]
"""``schedule(delay_seconds, wake)``: call ``wake`` once, about ``delay_seconds`` from now."""

WAKE_MARGIN_SECONDS = 0.01
"""How long after the quarantine's end the wake-up comes, so that a timer that fires a
hair early (its clock and the breaker's rounding differently) still finds it over."""


def daemon_timer(delay: float, wake: Callable[[], None]) -> None:
    """The default `Scheduler`: a daemon `threading.Timer` (it never keeps a process alive)."""
    timer = threading.Timer(delay, wake)
    timer.daemon = True
    timer.start()


def _wake(ref: weakref.ReferenceType[CircuitBreaker]) -> None:
    breaker = ref()
    if breaker is not None:
        breaker.refresh()


@dataclass(frozen=True, slots=True)
class Permit:
    """Leave to make one Redis call; hand it back with the call's result."""

    generation: int
    probe: bool


class CircuitBreaker:
    def __init__(
        self,
        failure_threshold: int = 5,
        open_seconds: float = 30,
        *,
        half_open_max_probes: int = 1,
        clock: Callable[[], float] = time.monotonic,
        on_transition: TransitionListener | None = None,
        schedule: Scheduler | None = daemon_timer,
    ) -> None:
        self._threshold = failure_threshold
        self._open_seconds = open_seconds
        self._max_probes = half_open_max_probes
        self._clock = clock
        self._on_transition = on_transition
        self._schedule = schedule
        self._lock = threading.Lock()
        self._state = BreakerState.CLOSED
        self._generation = 0
        self._permit = Permit(0, probe=False)
        """The permit of every CLOSED call of this generation (immutable, so shared)."""
        self._failures = 0
        self._probes_in_flight = 0
        self._opened_at = 0.0
        self._undelivered: deque[tuple[BreakerState, BreakerState]] = deque()
        self._delivery_lock = threading.RLock()  # re-entrant: a listener may call back

    @property
    def state(self) -> BreakerState:
        """The state now: an OPEN breaker whose quarantine is over reads (and moves to)
        HALF_OPEN, with or without a request."""
        return self.refresh()

    def refresh(self) -> BreakerState:
        """End an elapsed quarantine (OPEN -> HALF_OPEN) and return the state."""
        state = self._state
        if state is not BreakerState.OPEN or self._clock() - self._opened_at < self._open_seconds:
            return state
        with self._lock:
            changed = self._elapse_quarantine()
        self._notify(changed)
        return self._state

    def acquire(self) -> Permit | None:
        """A permit to call Redis, or None when the call must short-circuit."""
        # Lock-free for the two states nearly every call meets. Read the permit before
        # the state: if a transition slips in between, the permit is of an older
        # generation and its result will be ignored, never miscounted.
        closed_permit, state = self._permit, self._state
        if state is BreakerState.CLOSED:
            return closed_permit
        if state is BreakerState.OPEN and self._clock() - self._opened_at < self._open_seconds:
            return None
        with self._lock:
            changed = self._elapse_quarantine()
            permit: Permit | None = None
            if self._state is BreakerState.CLOSED:
                permit = self._permit
            elif (
                self._state is BreakerState.HALF_OPEN and self._probes_in_flight < self._max_probes
            ):
                self._probes_in_flight += 1
                permit = Permit(self._generation, probe=True)
        self._notify(changed)
        return permit

    def record_success(self, permit: Permit) -> None:
        """A genuine Redis success: resets the failure count; a successful probe closes."""
        if not permit.probe and self._failures == 0:
            # Nearly every call: nothing to reset, no lock. A failure recorded meanwhile
            # by another call is no later than this success in any order that matters.
            return
        with self._lock:
            changed = None
            if permit.generation == self._generation:
                if permit.probe:
                    changed = self._fire(_Event.PROBE_SUCCEEDED)
                else:
                    self._failures = 0
        self._notify(changed)

    def record_failure(self, permit: Permit) -> None:
        """A classified Redis failure: counts toward opening; a failed probe re-opens."""
        with self._lock:
            changed = None
            if permit.generation == self._generation:
                if permit.probe:
                    changed = self._fire(_Event.PROBE_FAILED)
                else:
                    # A plain permit is handed out only while CLOSED, and every transition
                    # starts a new generation: one of this generation means still CLOSED.
                    self._failures += 1
                    if self._failures >= self._threshold:
                        changed = self._fire(_Event.THRESHOLD_REACHED)
        self._notify(changed)

    def release(self, permit: Permit) -> None:
        """Give back a permit whose call ended without a Redis verdict (a bug raised)."""
        with self._lock:
            if permit.probe and permit.generation == self._generation:
                self._probes_in_flight -= 1

    def retry_after_seconds(self) -> int | None:
        """Whole seconds (>= 1) left in the OPEN quarantine, or None when not OPEN."""
        if self._state is not BreakerState.OPEN:  # read without the lock: a hint only
            return None
        left = self._opened_at + self._open_seconds - self._clock()
        return max(1, math.ceil(left))

    # Everything below runs with the lock held and returns the transition it made.

    def _elapse_quarantine(self) -> tuple[BreakerState, BreakerState] | None:
        if (
            self._state is BreakerState.OPEN
            and self._clock() - self._opened_at >= self._open_seconds
        ):
            return self._fire(_Event.QUARANTINE_ELAPSED)
        return None

    def _fire(self, event: _Event) -> tuple[BreakerState, BreakerState]:
        previous = self._state
        self._state = _TRANSITIONS[(previous, event)]
        self._generation += 1
        self._permit = Permit(self._generation, probe=False)
        self._failures = 0
        self._probes_in_flight = 0
        if self._state is BreakerState.OPEN:
            self._opened_at = self._clock()
        if self._on_transition is not None:
            self._undelivered.append((previous, self._state))
        return previous, self._state

    def _notify(self, changed: tuple[BreakerState, BreakerState] | None) -> None:
        """Deliver the queued transitions in order, and have an opening woken when its
        quarantine ends (called without the state lock)."""
        if changed is None:
            return
        if changed[1] is BreakerState.OPEN and self._schedule is not None:
            wake = functools.partial(_wake, weakref.ref(self))
            self._schedule(self._open_seconds + WAKE_MARGIN_SECONDS, wake)
        if self._on_transition is None:
            return
        with self._delivery_lock:
            while True:
                with self._lock:
                    if not self._undelivered:
                        return
                    transition = self._undelivered.popleft()
                self._on_transition(*transition)
