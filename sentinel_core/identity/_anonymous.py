"""Anonymous identity: a signed device cookie AND the client's network (SPEC §4).

The cookie is minted by the server: ``v1.<device id>.<HMAC-SHA256 signature>``, the
device id 16 random bytes and the signature over the version and device id with the
current secret, both base64url without padding. Verification checks the shape first
(so only ASCII of known length reaches the HMAC), then compares in constant time, and
accepts the previous secrets too, so secrets rotate without resetting devices; anything
that does not verify is treated as absent (a new device), never as an error. The
version prefix lets a later format coexist with this one during a rotation.

The network comes from the client address (the peer, or what trusted proxies
forwarded, see `_client_address`): an IPv4 address as is (IPv4-mapped IPv6
included), an IPv6 address by its /64 prefix (one subscriber owns a /64, so bucketing
by address would hand each client 2**64 buckets), anything else one shared "unknown"
bucket.

A request without a genuine cookie is not a fresh device: it is charged to its
network's `NEW_DEVICES` bucket, and the cookie minted for it counts from the next
request on. A client that drops its cookies (a script, a brute-force tool) therefore
gets one device's limit per network, not the network's ten devices' worth.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import re
import secrets

from sentinel_core.config._identity import AnonymousConfig
from sentinel_core.identity._client_address import parse_address
from sentinel_core.identity._keys import AnonymousIdentity, anonymous_key_secret

COOKIE_VERSION = "v1"
NEW_DEVICES = "new-devices"
"""The device id every request without a genuine cookie is charged to, one bucket per
network sized like a device's (SPEC §2): never a minted id (those are 22 characters of
base64url), so no cookie can name it."""
_DEVICE_ID_BYTES = 16
_DEVICE_ID = re.compile(r"[A-Za-z0-9_-]{22}")
_COOKIE = re.compile(r"v1\.([A-Za-z0-9_-]{22})\.([A-Za-z0-9_-]{43})")
"""``v1.`` + 16 bytes + 32 bytes of HMAC-SHA256, base64url without padding."""


class DeviceCookies:
    """Mints and verifies device cookies for one `AnonymousConfig`."""

    def __init__(self, config: AnonymousConfig) -> None:
        self.config = config
        self._current = config.cookie_secret.encode()
        self._accepted = [self._current, *(s.encode() for s in config.previous_cookie_secrets)]

    def verify(self, value: str | None) -> str | None:
        """The device id of a genuine cookie value, or None for anything else."""
        if not value or len(value) > 128:
            return None
        match = _COOKIE.fullmatch(value)
        if match is None:
            return None
        device_id, signature = match.groups()
        genuine = False
        for secret in self._accepted:
            # Every secret is tried, whatever matched: the time taken says nothing.
            genuine |= hmac.compare_digest(_sign(secret, device_id), signature.encode())
        return device_id if genuine else None

    def mint(self) -> tuple[str, str]:
        """A new device: (device id, cookie value signed with the current secret)."""
        device_id = _b64(secrets.token_bytes(_DEVICE_ID_BYTES))
        signature = _sign(self._current, device_id).decode()
        return device_id, f"{COOKIE_VERSION}.{device_id}.{signature}"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _sign(secret: bytes, device_id: str) -> bytes:
    digest = hmac.new(secret, f"{COOKIE_VERSION}.{device_id}".encode(), hashlib.sha256).digest()
    return _b64(digest).encode()


def client_network(client: str | None) -> str:
    """The bucket of a client address: IPv4 by address, IPv6 by /64, else ``unknown``."""
    address = parse_address(client)
    if address is None:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        network = ipaddress.IPv6Network((address, 64), strict=False)
        return f"ipv6:{network.network_address}/64"
    return f"ipv4:{address}"


def named_identity(config: AnonymousConfig, address: str, device: str) -> AnonymousIdentity:
    """The anonymous identity of a client an operator names (peek, reset): its IP
    address and its device, as the device cookie's value or the bare device id.

    Raises:
        ValueError: ``address`` is not an IP address, or ``device`` is neither a
            cookie signed with one of the accepted secrets nor a device id.
    """
    if parse_address(address) is None:
        raise ValueError(f"{address!r} is not an IP address (IPv4, or IPv6 for its /64)")
    device_id = device if _DEVICE_ID.fullmatch(device) else DeviceCookies(config).verify(device)
    if device_id is None:
        raise ValueError(
            "the device is neither a device cookie signed with the configured secrets "
            f"nor a device id (the 22 characters after {COOKIE_VERSION}. in the cookie)"
        )
    secret = anonymous_key_secret(config.cookie_secret, config.previous_cookie_secrets)
    return AnonymousIdentity(device_id, client_network(address), secret)
