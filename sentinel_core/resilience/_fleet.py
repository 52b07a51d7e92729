"""The fleet's size as this process last saw it, for ``fallback_scope: "fleet"`` (SPEC §2).

While Redis answers, every process announces itself there (the heartbeat, `_fleet` at
the top of the package) and learns how many processes are live; this object keeps those
counts. When Redis fails, the emergency limiter runs each fleet-scoped endpoint at
``fallback_rate`` divided by its count, so N processes admit about ``fallback_rate`` in
all, not N times it. No I/O here: the heartbeat hands the counts in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping


class FleetShare:
    """The live process count last seen for each fleet-scoped endpoint (1 until seen)."""

    def __init__(self, endpoint_ids: Iterable[str] = ()) -> None:
        self._counts: Mapping[str, int] = dict.fromkeys(endpoint_ids, 1)

    @property
    def endpoint_ids(self) -> tuple[str, ...]:
        return tuple(self._counts)

    def seen(self, counts: Mapping[str, int]) -> None:
        """The counts a heartbeat just read; an endpoint missing from them keeps its own."""
        # One assignment of a new mapping: a reader sees the old counts or the new ones.
        self._counts = {
            endpoint_id: max(1, counts.get(endpoint_id, known))
            for endpoint_id, known in self._counts.items()
        }

    def divisor(self, endpoint_id: str) -> int:
        """How many processes share ``endpoint_id``'s fallback_rate: 1 unless fleet-scoped."""
        return self._counts.get(endpoint_id, 1)
