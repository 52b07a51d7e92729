"""Who is limited, reduced to bucket keys (SPEC §3). The one place keys are built.

Raw identities never reach a key. Tenants: ``sentinel:v1:{<hash>}:<endpoint>:<version>``,
the hash the first 128 bits of SHA-256 in base64url (22 characters), so that a token
bucket's key stays within the 44 bytes jemalloc packs with an integer value in 88 bytes.
Anonymous clients: a separate ``sentinel:v2:`` keyspace whose hashes are keyed
(HMAC-SHA256) with a server secret derived from ``anonymous.cookie_secret``: the IPv4
space has 2**32 addresses, so an unkeyed hash of one is recovered by enumeration.

The part in braces is the Redis Cluster hash tag: every key of one script call shares it
(so the call is single-slot), while different identities spread over slots.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from dataclasses import dataclass, field
from functools import cache

from sentinel_core._models import Policy

_HASH_BYTES = 16
"""128 bits: collisions between two identities need about 2**64 of them."""
_KEY_SECRET_LABEL = b"sentinel bucket keys v2"


def _b64(digest: bytes) -> str:
    return base64.urlsafe_b64encode(digest[:_HASH_BYTES]).decode()[:22]


def compact_hash(value: str) -> str:
    """SHA-256 of ``value``, its first 128 bits in base64url without padding (22 chars)."""
    return _b64(hashlib.sha256(value.encode("utf-8", "surrogatepass")).digest())


@cache
def _keyed(secret: bytes) -> hmac.HMAC:
    """The HMAC-SHA256 under ``secret``, fed nothing yet: never updated, only copied.

    Keying an HMAC (deriving its inner and outer pads from the secret) is a third of
    hashing a short value, and an anonymous request hashes three or four under the
    same few secrets: a copy of the keyed state skips it."""
    return hmac.new(secret, digestmod=hashlib.sha256)


def keyed_hash(secret: bytes, value: str) -> str:
    """HMAC-SHA256 of ``value`` under ``secret``, 128 bits in base64url (22 chars)."""
    mac = _keyed(secret).copy()
    mac.update(value.encode("utf-8", "surrogatepass"))
    return _b64(mac.digest())


@cache
def anonymous_key_secret(cookie_secret: str, previous: tuple[str, ...] = ()) -> bytes:
    """The secret of anonymous bucket keys: HMAC-SHA256(the oldest cookie secret still
    accepted, a fixed label); the oldest is the last of ``previous``, if any.

    Derived, not a cookie secret itself, so one key never serves two purposes (a bucket
    hash can never be replayed as a cookie signature, or the reverse), and no new
    setting is needed: every process that verifies cookies derives the same one. The
    oldest accepted secret, so a rotation (a new ``cookie_secret``, the old one listed
    in ``previous_cookie_secrets``) keeps every bucket as it keeps every cookie; retiring
    the old secret moves anonymous clients to new buckets, once (docs/security.md)."""
    cookie_secret = previous[-1] if previous else cookie_secret
    return hmac.new(
        cookie_secret.encode("utf-8", "surrogatepass"), _KEY_SECRET_LABEL, hashlib.sha256
    ).digest()


@dataclass(frozen=True, slots=True)
class TenantIdentity:
    """A tenant: the validated JWT ``sub``, a plugin's API key, or a worker's own id."""

    tenant: str
    hash: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.tenant:
            # One bucket for every caller whose id came out empty: a bug, never a tenant.
            raise ValueError("a tenant id must be a non-empty string")
        object.__setattr__(self, "hash", compact_hash(self.tenant))

    def __repr__(self) -> str:  # never print the raw identity
        return f"TenantIdentity(hash={self.hash[:12]}...)"

    def bucket_keys(self, policy: Policy) -> tuple[str, ...]:
        """One key per limit: the first under the plain key, a layer ``i`` (from 1)
        under the plain key and ``:i``, all in the tenant's slot."""
        key = f"sentinel:v1:{{{self.hash}}}:{policy.endpoint_id}:{policy.version}"
        if not policy.layers:
            return (key,)
        return (key, *(f"{key}:{index}" for index in range(1, len(policy.layers) + 1)))


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
    (the network's keyed hash) and share a Redis Cluster slot. The device's key is
    therefore per (network, device): a device that changes networks starts a fresh
    device bucket, and meets the new network's bucket. The scheme is the same on a
    single Redis, so moving to a cluster changes no state. The network bucket is the
    larger one (a policy's ``network_rate``/``network_burst``): many devices share one NAT.

    ``secret`` keys every hash (`anonymous_key_secret`): without it, nobody who reads
    Redis or the logs can tell which network or device a key belongs to.
    """

    device_id: str
    network: str
    secret: bytes = field(repr=False)
    minted: str | None = field(default=None, repr=False)
    """A request without a genuine cookie: ``device_id`` is then the network's new
    devices (`identity._anonymous.NEW_DEVICES`), whose bucket decides with the
    network's, and this is the device id minted for it, whose own bucket pays too (it
    admits, being new): a device's first request counts against it like the others."""
    hash: str = field(init=False, repr=False)
    _network_hash: str = field(init=False, repr=False)
    _device_hashes: tuple[str, ...] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_network_hash", keyed_hash(self.secret, self.network))
        devices = (self.device_id,) if self.minted is None else (self.device_id, self.minted)
        hashes = tuple(keyed_hash(self.secret, device) for device in devices)
        object.__setattr__(self, "_device_hashes", hashes)
        both = keyed_hash(self.secret, f"{self.device_id}|{self.network}")
        object.__setattr__(self, "hash", both)

    def __repr__(self) -> str:
        return f"AnonymousIdentity(hash={self.hash[:12]}...)"

    def bucket_keys(self, policy: Policy) -> tuple[str, ...]:
        """The device's key (a new device's: the network's new devices, then its own),
        then the network's; a layered policy's keys of each (one per limit, the first
        under the plain key and a layer ``i`` under ``:i``), in that order. The
        network's last key is the call's last (`LocalDenials`)."""
        tag = f"{{{self._network_hash}}}"
        suffix = f"{policy.endpoint_id}:{policy.version}"
        bases = [f"sentinel:v2:{tag}:d:{digest}:{suffix}" for digest in self._device_hashes]
        bases.append(f"sentinel:v2:{tag}:n:{suffix}")
        if not policy.layers:
            return tuple(bases)
        layers = range(1, len(policy.layers) + 1)
        return tuple(key for base in bases for key in (base, *(f"{base}:{i}" for i in layers)))


Identity = TenantIdentity | AnonymousIdentity
