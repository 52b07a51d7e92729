"""Exemptions (SPEC §2 ``exempt``, SPEC §6 `sentinel_exempt`): requests never limited.

An exempt request skips the store entirely: no Redis call, no decision, no RateLimit
header; it is only counted (``sentinel_exempt_total{endpoint_id}``). The order:

1. a plugin's `sentinel_exempt` answer, when it gives one, is final (True exempts,
   False refuses every exemption for that request);
2. the client's network (after ``trusted_proxies``), before identification, so an
   exempt network needs no credentials;
3. the tenant, once identified (a verified JWT ``sub`` or a plugin's identity); a
   request whose token does not verify is not exempt, it is answered 401.

Exempt tenant ids are compared by their `TenantIdentity` hash: the raw ids stay in the
configuration, which never prints them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sentinel_core._models import Policy
from sentinel_core.config._network import ExemptConfig
from sentinel_core.identity._client_address import in_networks, parse_address
from sentinel_core.identity._keys import Identity, TenantIdentity


class Exemptions:
    """The exemption rules of one configuration and the plugins' `sentinel_exempt`.

    Args:
        config: the ``exempt`` section.
        plugin_verdict: the plugins' `sentinel_exempt` answer for a request and policy.
        on_exempt: called with the endpoint id of each exempt request (the metric).
    """

    def __init__(
        self,
        config: ExemptConfig,
        plugin_verdict: Callable[[Any, Policy], bool | None],
        on_exempt: Callable[[str], None],
    ) -> None:
        self._networks = config.networks
        self._tenant_hashes = frozenset(TenantIdentity(tenant).hash for tenant in config.tenants)
        self._plugin_verdict = plugin_verdict
        self._on_exempt = on_exempt

    def by_request(self, request: Any, policy: Policy, client: str | None) -> bool | None:
        """Whether ``request`` is exempt before identification: True or False when a
        plugin or the client's network decides it, None to ask `by_identity` next."""
        verdict = self._plugin_verdict(request, policy)
        if verdict is not None:
            return verdict
        if self._networks:
            address = parse_address(client)
            if address is not None and in_networks(address, self._networks):
                return True
        return None

    def by_identity(self, identity: Identity) -> bool:
        """Whether an identified request is exempt: its tenant is listed."""
        return isinstance(identity, TenantIdentity) and identity.hash in self._tenant_hashes

    def count(self, policy: Policy) -> None:
        """Record one exempt request on ``policy``'s endpoint."""
        self._on_exempt(policy.endpoint_id)
