"""Anonymous identity: a signed device cookie AND the client's network (SPEC §4).

The cookie is minted by the server: ``v1.<device id>.<HMAC-SHA256 signature>``, the
signature over the version and device id with the current secret. Verification is
constant-time and accepts the previous secrets too, so secrets rotate without resetting
devices; anything that does not verify is treated as absent (a new device), never as
an error. The network comes from the peer address only: an IPv4 address as is, an
IPv6 address by its /64 prefix (one subscriber owns a /64), anything else one shared
"unknown" bucket.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import ipaddress
import secrets

from ._config import AnonymousConfig

COOKIE_VERSION = "v1"
_DEVICE_ID_BYTES = 16


class DeviceCookies:
    def __init__(self, config: AnonymousConfig) -> None:
        self.config = config
        self._current = config.cookie_secret.encode()
        self._accepted = [self._current, *(s.encode() for s in config.previous_cookie_secrets)]

    def verify(self, value: str | None) -> str | None:
        """The device id of a genuine cookie value, or None for anything else."""
        if not value or len(value) > 256:
            return None
        parts = value.split(".")
        if len(parts) != 3 or parts[0] != COOKIE_VERSION:
            return None
        _, device_id, signature = parts
        for secret in self._accepted:
            if hmac.compare_digest(_sign(secret, device_id), signature):
                return device_id
        return None

    def mint(self) -> tuple[str, str]:
        """A new device: (device id, cookie value signed with the current secret)."""
        device_id = (
            base64.urlsafe_b64encode(secrets.token_bytes(_DEVICE_ID_BYTES)).decode().rstrip("=")
        )
        return device_id, f"{COOKIE_VERSION}.{device_id}.{_sign(self._current, device_id)}"


def _sign(secret: bytes, device_id: str) -> str:
    message = f"{COOKIE_VERSION}.{device_id}".encode("utf-8", "surrogatepass")
    digest = hmac.new(secret, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def client_network(peer: str | None) -> str:
    """The bucket of a peer address: IPv4 by address, IPv6 by /64, else ``unknown``."""
    if not peer:
        return "unknown"
    try:
        address = ipaddress.ip_address(peer.strip().split("%", 1)[0])
    except ValueError:
        return "unknown"
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped
        if mapped is not None:
            return f"ipv4:{mapped}"
        network = ipaddress.IPv6Network((address, 64), strict=False)
        return f"ipv6:{network.network_address}/64"
    return f"ipv4:{address}"
