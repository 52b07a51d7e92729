"""How Sentinel's values read as text: reasons and rates print as operators write them,
and identities never print the raw tenant, device or network (SPEC: raw identities
never reach logs)."""

from __future__ import annotations

import pytest

from sentinel_core import AnonymousIdentity, DecisionReason, Rate, TenantIdentity


@pytest.mark.parametrize("reason", list(DecisionReason))
def test_a_decision_reason_prints_as_its_value(reason: DecisionReason) -> None:
    assert str(reason) == reason.value
    assert f"{reason}" == reason.value


def test_a_rate_prints_as_count_per_period_in_seconds() -> None:
    assert str(Rate(5, 60)) == "5/60s"
    assert f"{Rate(1, 86_400)}" == "1/86400s"


@pytest.mark.security
def test_a_tenant_identity_repr_shows_a_hash_prefix_not_the_tenant() -> None:
    identity = TenantIdentity("acme-corp-secret-tenant")

    text = repr(identity)
    assert "acme-corp-secret-tenant" not in text
    assert text == f"TenantIdentity(hash={identity.hash[:12]}...)"
    assert str(identity) == text


@pytest.mark.security
def test_an_anonymous_identity_repr_shows_neither_device_nor_network() -> None:
    identity = AnonymousIdentity("device-0123456789", "198.51.100.23", b"k" * 32)

    text = repr(identity)
    assert "device-0123456789" not in text
    assert "198.51.100.23" not in text
    assert text == f"AnonymousIdentity(hash={identity.hash[:12]}...)"
    assert f"{[identity]}" == f"[{text}]"
