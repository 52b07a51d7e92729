"""An endpoint compiled once (STYLE 17): what its configuration fixes, computed at start-up.

Every request of an endpoint would otherwise look its policy up by id and recompute
what the policy fixes. `Endpoint` holds it instead, built once per endpoint id by the
engine and handed to the adapters, which keep it per route: the policy, whether a
request of it runs the straight line (`straight`), and the script call of a decision
(`decide_call`: its arguments made once per number of keys, a tenant's buckets or an
anonymous client's; a tenant's whole call kept for the most active tenants).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sentinel_core._memo import Memo
from sentinel_core._models import Algorithm, Policy
from sentinel_core.identity._keys import Identity, TenantIdentity
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import ScriptCall, build_script_call, script_args

CALLS_KEPT = 1_024
"""Tenants whose decision call an endpoint keeps (about 250 bytes each: 250 kB at most)."""


@dataclass(frozen=True, slots=True, eq=False)
class Endpoint:
    """One endpoint id, compiled from its configured policy."""

    policy: Policy
    straight: bool = field(init=False)
    """One script call decides a request and nothing is owed after the handler but a
    settlement (no ``count`` to consume, no concurrency lease to hand back): the
    straight line of `Sentinel.admit`, whose `Admission` settles a ``settle`` policy at
    completion. The others take the lifecycle's conversation."""
    bucket_call: bool = field(init=False)
    """A decision's script call is the identity's bucket keys and arguments compiled
    here (`decide_call`): a token bucket or a sliding window. A quota's call needs its
    calendar, a concurrency call a new lease name: the engine builds those."""
    _args: dict[int, tuple[int, ...]] = field(init=False, default_factory=dict, repr=False)
    _calls: Memo[str, ScriptCall] = field(
        init=False, default_factory=lambda: Memo(CALLS_KEPT), repr=False
    )

    def __post_init__(self) -> None:
        policy = self.policy
        straight = policy.count is None and policy.algorithm is not Algorithm.CONCURRENCY
        object.__setattr__(self, "straight", straight)
        bucket_call = policy.algorithm in (Algorithm.TOKEN_BUCKET, Algorithm.SLIDING_WINDOW)
        object.__setattr__(self, "bucket_call", bucket_call)

    @property
    def endpoint_id(self) -> str:
        return self.policy.endpoint_id

    def decide_call(self, identity: Identity) -> ScriptCall:
        """The script call that decides ``identity`` under the configured policy (a
        `bucket_call` endpoint's).

        A tenant's call depends on nothing but its hash (its keys; the ARGV is the
        policy's), and building it is half of `DecisionEngine.begin`: it is kept for the
        most active tenants (`CALLS_KEPT`, emptied when full, which costs one rebuild
        per tenant). Safe to share: a call is immutable, and a lost race builds twice.
        An anonymous client's keys change with its minted device id: built each time."""
        if identity.__class__ is not TenantIdentity:
            return self._build_call(identity)
        call = self._calls.get(identity.hash)
        if call is None:
            call = self._calls.keep(identity.hash, self._build_call(identity))
        return call

    def _build_call(self, identity: Identity) -> ScriptCall:
        policy = self.policy
        keys = identity.bucket_keys(policy)
        args = self._args.get(len(keys))
        if args is None:  # made once per number of keys
            args = self._args[len(keys)] = script_args(policy, Mode.DECIDE, len(keys))
        return build_script_call(policy.algorithm, keys, args)
