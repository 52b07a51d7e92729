"""An endpoint's compiled decision call (STYLE 17): what the configuration fixes is made
once, and a tenant's whole call is kept, yet every request still gets its own buckets."""

from __future__ import annotations

import pytest

from sentinel_core import AnonymousIdentity, Sentinel, TenantIdentity
from sentinel_core.decision import _endpoint
from sentinel_core.identity._keys import anonymous_key_secret
from sentinel_core.store._reference import Mode
from sentinel_core.store._scripts import script_args
from tests.conftest import make_config
from tests.support.http import make_sentinel

BUCKET = {"algorithm": "token_bucket", "rate": "5/second", "fail_mode": "closed"}


@pytest.fixture
def sentinel() -> Sentinel:
    return make_sentinel(make_config("memory://", api=BUCKET))


def test_a_tenant_s_call_is_built_once_with_its_own_keys(sentinel: Sentinel) -> None:
    endpoint, policy = sentinel.endpoint("api"), sentinel.policy("api")
    tenant = TenantIdentity("acme")

    call = endpoint.decide_call(tenant)

    assert endpoint.decide_call(TenantIdentity("acme")) is call
    assert call.keys == tenant.bucket_keys(policy)
    assert call.args == script_args(policy, Mode.DECIDE, 1)


def test_kept_calls_are_forgotten_when_full_and_each_tenant_keeps_its_keys(
    sentinel: Sentinel, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_endpoint, "CALLS_KEPT", 2)
    policy = sentinel.policy("api")
    endpoint = _endpoint.Endpoint(policy)  # compiled with the smaller memo
    tenants = ["tenant-a", "tenant-b", "tenant-c", "tenant-a"]

    calls = [endpoint.decide_call(TenantIdentity(tenant)) for tenant in tenants]

    assert [call.keys for call in calls] == [
        TenantIdentity(tenant).bucket_keys(policy) for tenant in tenants
    ]
    assert calls[3] is not calls[0]  # forgotten when the third came, then built again


def test_an_anonymous_client_s_call_follows_its_minted_device(sentinel: Sentinel) -> None:
    """Two new devices of one network share the identity's hash, not their keys."""
    endpoint, policy = sentinel.endpoint("api"), sentinel.policy("api")
    secret = anonymous_key_secret("s" * 32)
    first, second = (
        AnonymousIdentity("new-devices", "203.0.113.7", secret, minted=minted)
        for minted in ("device-1", "device-2")
    )

    calls = [endpoint.decide_call(first), endpoint.decide_call(second)]

    assert [call.keys for call in calls] == [first.bucket_keys(policy), second.bucket_keys(policy)]
    assert calls[0].keys != calls[1].keys
