"""Exemptions (SPEC §2 ``exempt``, SPEC §6 `sentinel_exempt`) in the core's HTTP layer:
who is exempt, in which order the rules apply, and what an exempt request leaves
behind (a metric, and nothing else). The adapters' suites show the same on Redis,
with the store's command counts unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import ConfigError, Decision, hookimpl, load_config
from sentinel_core.adapter import Outcome
from tests.support.http import make_sentinel, request_view
from tests.support.tokens import HS_SECRET, OTHER_HS_SECRET, bearer, claims, hs256, mint

ENDPOINT, LOGIN = "api.search", "auth.login"
VIP, OFFICE = "vip-customer-7", "198.51.100.0/24"


def config(**top: Any) -> dict[str, Any]:
    return {
        "redis_url": "memory://",
        "jwt": {"key": HS_SECRET},
        "anonymous": {"cookie_secret": HS_SECRET},
        "policies": {
            ENDPOINT: {"algorithm": "token_bucket", "rate": "1/hour", "fail_mode": "closed"},
            LOGIN: {
                "algorithm": "token_bucket",
                "rate": "1/hour",
                "identity": "anonymous",
                "fail_mode": "closed",
            },
        },
        "exempt": {"tenants": [VIP], "networks": [OFFICE, "2001:db8::/32"]},
        **top,
    }


class Recorder:
    """Keeps every decision, and answers `sentinel_exempt` with ``verdict``."""

    def __init__(self, verdict: bool | str | None = None) -> None:
        self.verdict = verdict
        self.decisions: list[Decision] = []
        self.asked: list[str] = []

    @hookimpl
    def sentinel_exempt(self, request: Any, policy: Any) -> Any:
        self.asked.append(policy.endpoint_id)
        return self.verdict

    @hookimpl
    def sentinel_decision(self, decision: Decision, request: Any) -> None:
        self.decisions.append(decision)


def exempt_count(registry: CollectorRegistry, endpoint_id: str = ENDPOINT) -> float:
    return registry.get_sample_value("sentinel_exempt_total", {"endpoint_id": endpoint_id}) or 0


def assert_exempt(outcome: Outcome) -> None:
    assert outcome.allowed
    assert outcome.headers == ()
    assert outcome.decision is None
    assert outcome.cookie is None


def token(tenant: str) -> dict[str, str]:
    return {"Authorization": bearer(hs256(sub=tenant))}


def test_an_exempt_tenant_is_never_limited_and_produces_no_decision() -> None:
    registry, recorder = CollectorRegistry(), Recorder()
    sentinel = make_sentinel(config(), registry=registry, plugins=[recorder])
    for _ in range(3):  # the limit is 1/hour
        assert_exempt(sentinel.guard(ENDPOINT, request_view(headers=token(VIP))))
    assert recorder.decisions == []
    assert exempt_count(registry) == 3
    assert sentinel.guard(ENDPOINT, request_view(headers=token("other"))).allowed
    assert not sentinel.guard(ENDPOINT, request_view(headers=token("other"))).allowed
    assert len(recorder.decisions) == 2


async def test_an_exempt_request_is_exempt_on_the_async_path_too() -> None:
    registry = CollectorRegistry()
    sentinel = make_sentinel(config(), registry=registry)
    for _ in range(2):
        assert_exempt(await sentinel.aguard(ENDPOINT, request_view(headers=token(VIP))))
    assert exempt_count(registry) == 2


def test_an_exempt_tenant_with_a_bad_token_is_answered_401() -> None:
    sentinel = make_sentinel(config())
    forged = {"Authorization": bearer(mint(claims(VIP), OTHER_HS_SECRET))}
    assert sentinel.guard(ENDPOINT, request_view(headers=forged)).status == 401


@pytest.mark.parametrize("peer", ["198.51.100.9", "::ffff:198.51.100.9", "2001:db8::5"])
def test_an_exempt_network_needs_no_credentials(peer: str) -> None:
    registry = CollectorRegistry()
    sentinel = make_sentinel(config(), registry=registry)
    assert_exempt(sentinel.guard(ENDPOINT, request_view(peer=peer)))
    assert_exempt(sentinel.guard(LOGIN, request_view(peer=peer)))  # no device cookie minted
    assert exempt_count(registry) == 1
    assert exempt_count(registry, LOGIN) == 1


@pytest.mark.parametrize("peer", ["203.0.113.7", "garbage", None])
def test_other_clients_are_identified_as_usual(peer: str | None) -> None:
    sentinel = make_sentinel(config())
    assert sentinel.guard(ENDPOINT, request_view(peer=peer)).status == 401
    assert sentinel.guard(LOGIN, request_view(peer=peer)).decision is not None


def test_a_plugin_identity_can_be_an_exempt_tenant() -> None:
    class ApiKeys:
        @hookimpl
        def sentinel_identify(self, request: Any, policy: Any) -> str | None:
            return request.headers.get("x-api-key")

    sentinel = make_sentinel(config(), plugins=[ApiKeys()])
    assert_exempt(sentinel.guard(ENDPOINT, request_view(headers={"X-Api-Key": VIP})))
    assert sentinel.guard(ENDPOINT, request_view(headers={"X-Api-Key": "k"})).decision


def test_the_hook_exempts_a_request_the_configuration_does_not() -> None:
    registry, recorder = CollectorRegistry(), Recorder(True)
    sentinel = make_sentinel(config(), registry=registry, plugins=[recorder])
    assert_exempt(sentinel.guard(ENDPOINT, request_view()))  # no token, no exempt network
    assert recorder.asked == [ENDPOINT]
    assert exempt_count(registry) == 1


def test_the_hook_refusing_an_exemption_overrides_the_configuration() -> None:
    recorder = Recorder(False)
    sentinel = make_sentinel(config(), plugins=[recorder])
    office = request_view(peer="198.51.100.9", headers=token(VIP))
    assert sentinel.guard(ENDPOINT, office).allowed
    assert not sentinel.guard(ENDPOINT, office).allowed  # limited like anyone
    assert len(recorder.decisions) == 2


def test_the_hook_passing_leaves_the_configuration_to_decide() -> None:
    recorder = Recorder(None)
    sentinel = make_sentinel(config(), plugins=[recorder])
    assert_exempt(sentinel.guard(ENDPOINT, request_view(headers=token(VIP))))
    assert recorder.asked == [ENDPOINT]


def test_a_hook_answer_that_is_not_a_bool_is_a_programming_error() -> None:
    sentinel = make_sentinel(config(), plugins=[Recorder("yes")])
    with pytest.raises(TypeError, match="sentinel_exempt must return True, False or None"):
        sentinel.guard(ENDPOINT, request_view())


def test_without_an_exempt_section_nobody_is_exempt() -> None:
    settings = config()
    del settings["exempt"]
    sentinel = make_sentinel(settings)
    assert sentinel.guard(ENDPOINT, request_view(headers=token(VIP))).decision is not None
    assert sentinel.guard(ENDPOINT, request_view(peer="198.51.100.9")).status == 401


def test_exempt_tenants_never_show_in_the_configuration_or_its_errors() -> None:
    loaded = load_config(config())
    assert VIP not in repr(loaded)
    assert "<1 hidden>" in repr(loaded.exempt)
    with pytest.raises(ConfigError) as caught:
        load_config(config(exempt={"tenants": [VIP, ""]}))
    assert caught.value.path == "exempt.tenants.1"
    assert VIP not in str(caught.value)


@pytest.mark.parametrize(
    ("exempt", "path", "message"),
    [
        ({"tenants": VIP}, "exempt.tenants", "expected a list of tenant ids"),
        ({"tenants": [7]}, "exempt.tenants.0", "expected a non-empty string"),
        ({"networks": ["198.51.100.1/24"]}, "exempt.networks.0", "198.51.100.0/24"),
        ({"network": [OFFICE]}, "exempt.network", "unknown key"),
        ("everyone", "exempt", "expected a table"),
    ],
)
def test_exempt_config_errors_name_the_key_path(exempt: Any, path: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        load_config(config(exempt=exempt))
    assert caught.value.path == path


def test_an_exempt_network_is_matched_on_the_forwarded_client_behind_a_trusted_proxy() -> None:
    sentinel = make_sentinel(config(trusted_proxies=["192.0.2.10"]))
    forwarded = {"X-Forwarded-For": "198.51.100.9"}
    assert_exempt(sentinel.guard(ENDPOINT, request_view(peer="192.0.2.10", headers=forwarded)))
    assert (
        sentinel.guard(ENDPOINT, request_view(peer="192.0.2.11", headers=forwarded)).status == 401
    )


@pytest.mark.parametrize(
    "unreadable",
    [
        {"X-Forwarded-For": "6.6.6.6, " * 1024 + "203.0.113.66"},
        {"Forwarded": 'for="203.0.113.66'},
        {"Forwarded": "for=203.0.113.66", "X-Forwarded-For": "203.0.113.67"},
    ],
    ids=["padded", "broken", "mismatched"],
)
def test_an_unreadable_forwarding_header_never_makes_a_request_exempt(
    unreadable: dict[str, str],
) -> None:
    """SPEC §4: a trusted proxy inside an exempt network (198.51.100.10 in the office)
    forwards a header the client garbled: the request is limited as the proxy's
    address, not exempt as it."""
    sentinel = make_sentinel(config(trusted_proxies=["198.51.100.10"]))
    proxy_itself = sentinel.guard(ENDPOINT, request_view(peer="198.51.100.10"))
    assert_exempt(proxy_itself)
    headers = {**token("mallory"), **unreadable}
    outcomes = [
        sentinel.guard(ENDPOINT, request_view(peer="198.51.100.10", headers=headers))
        for _ in range(2)
    ]
    assert [outcome.status for outcome in outcomes] == [200, 429]
    assert outcomes[0].decision is not None
    login = sentinel.guard(LOGIN, request_view(peer="198.51.100.10", headers=unreadable))
    assert login.decision is not None  # anonymous: the proxy's network bucket
