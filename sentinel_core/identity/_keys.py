"""Who is limited, reduced to bucket keys (SPEC §3). The one place keys are built.

Raw identities never reach a key: tenants and anonymous clients are hashed with
SHA-256. The part in braces is the Redis Cluster hash tag: every key of one script call
shares it (so the call is single-slot), while different identities spread over slots.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from sentinel_core._models import Policy


def sha256_hex(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class TenantIdentity:
    """A tenant: the validated JWT ``sub``, a plugin's API key, or a worker's own id."""

    tenant: str
    hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "hash", sha256_hex(self.tenant))

    def __repr__(self) -> str:  # never print the raw identity
        return f"TenantIdentity(hash={self.hash[:12]}...)"

    def bucket_keys(self, policy: Policy) -> tuple[str, ...]:
        return (f"sentinel:v1:{{{self.hash}}}:{policy.endpoint_id}:{policy.version}",)


_RECENT_TENANTS_MAX = 4_096
_recent_tenants: dict[str, TenantIdentity] = {}


def tenant_identity(tenant: str) -> TenantIdentity:
    """The `TenantIdentity` of ``tenant``, remembered for the most active tenants:
    hashing is a third of a short-circuited decision's cost. The memory is bounded
    (emptied when full, which costs one re-hash per tenant) and safe to share:
    identities are immutable, and a lost race only hashes twice."""
    identity = _recent_tenants.get(tenant)
    if identity is None:
        if len(_recent_tenants) >= _RECENT_TENANTS_MAX:
            _recent_tenants.clear()
        identity = _recent_tenants[tenant] = TenantIdentity(tenant)
    return identity


@dataclass(frozen=True, slots=True)
class AnonymousIdentity:
    """An anonymous client: its signed device id AND its network (IPv4 address or IPv6 /64).

    Both buckets are decided in one script call, so both keys carry the same hash tag
    (the network's) and share a Redis Cluster slot. The device's key is therefore per
    (network, device): a device that changes networks starts a fresh device bucket, and
    meets the new network's bucket. The scheme is the same on a single Redis, so moving
    to a cluster changes no state. The network bucket is the larger one (a policy's
    ``network_rate``/``network_burst``): many devices share one NAT.
    """

    device_id: str
    network: str
    hash: str = field(init=False, repr=False)
    _network_hash: str = field(init=False, repr=False)
    _device_hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_network_hash", sha256_hex(self.network))
        object.__setattr__(self, "_device_hash", sha256_hex(self.device_id))
        object.__setattr__(self, "hash", sha256_hex(f"{self.device_id}|{self.network}"))

    def __repr__(self) -> str:
        return f"AnonymousIdentity(hash={self.hash[:12]}...)"

    def bucket_keys(self, policy: Policy) -> tuple[str, ...]:
        tag = f"{{{self._network_hash}}}"
        suffix = f"{policy.endpoint_id}:{policy.version}"
        return (
            f"sentinel:v2:{tag}:device:{self._device_hash}:{suffix}",
            f"sentinel:v2:{tag}:ip:{suffix}",
        )


Identity = TenantIdentity | AnonymousIdentity
