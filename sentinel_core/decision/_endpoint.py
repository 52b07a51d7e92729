"""An endpoint compiled once (STYLE 17): what its configuration fixes, computed at start-up.

Every request of an endpoint would otherwise look its policy up by id and recompute
what the policy fixes. `Endpoint` holds it instead, built once per endpoint id by the
engine and handed to the adapters, which keep it per route: the policy, whether a
request of it runs the straight line (`straight`), and the script arguments of a
decision, per number of keys (a tenant's buckets or an anonymous client's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel_core._models import Algorithm, Policy
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import script_args


@dataclass(frozen=True, slots=True, eq=False)
class Endpoint:
    """One endpoint id, compiled from its configured policy."""

    policy: Policy
    straight: bool = field(init=False)
    """One script call decides a request and nothing is owed after the handler but a
    settlement (no ``count`` to consume, no concurrency lease to hand back): the
    straight line of `Sentinel.admit`, whose `Admission` settles a ``settle`` policy at
    completion. The others take the lifecycle's conversation."""
    _args: dict[int, tuple[int, ...]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        policy = self.policy
        straight = policy.count is None and policy.algorithm is not Algorithm.CONCURRENCY
        object.__setattr__(self, "straight", straight)

    @property
    def endpoint_id(self) -> str:
        return self.policy.endpoint_id

    def decide_args(self, keys: int) -> tuple[int, ...]:
        """The ARGV of a decision over ``keys`` buckets (made once per key count)."""
        args = self._args.get(keys)
        if args is None:
            args = self._args[keys] = script_args(self.policy, Mode.DECIDE, keys)
        return args
