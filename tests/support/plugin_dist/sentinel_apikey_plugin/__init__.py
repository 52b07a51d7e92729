"""A Sentinel plugin as a third party would ship it: API-key identity and a pro tier.

``X-Api-Key`` names an account (a real plugin would look the key up in its database);
the account, not the key, becomes the tenant, so rotating a key keeps the quota. Pro
accounts get five times the endpoint's limit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sentinel_core import Policy, TenantIdentity, hookimpl

ACCOUNTS = {"key-free-123": "acme", "key-pro-456": "globex"}
"""API key -> account."""
PRO_ACCOUNTS = frozenset({"globex"})
PRO_FACTOR = 5


@hookimpl
def sentinel_identify(request: Any, policy: Policy) -> str | None:
    account = ACCOUNTS.get(request.headers.get("x-api-key") or "")
    return f"account:{account}" if account is not None else None


@hookimpl
def sentinel_resolve_policy(endpoint_id: str, identity: Any, policy: Policy) -> Policy | None:
    if isinstance(identity, TenantIdentity) and identity.tenant.removeprefix("account:") in (
        PRO_ACCOUNTS
    ):
        return dataclasses.replace(policy, burst=policy.burst * PRO_FACTOR)
    return None
