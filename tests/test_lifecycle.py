"""The request lifecycle every adapter drives: `Sentinel.admit`/`aadmit` before the
handler, `Admission.complete`/`acomplete` after it, framework-free.

Several endpoint ids are decided in order and stop at the first denial; identities
come first, so a 401 costs no store call; the RateLimit fields of every charged
policy join into one List per field; a device cookie is minted once per request and
set only on responses that do not refuse.
"""

from __future__ import annotations

from typing import Any

from sentinel_core import Sentinel
from sentinel_core.adapter import CANCELLED, SERVER_ERROR, Outcome, response_fields
from sentinel_core.http._lifecycle import join_fields
from sentinel_core.testing import ratelimit_headers
from tests.support.http import make_sentinel, request_view
from tests.support.tokens import COOKIE_SECRET, HS_SECRET, bearer, hs256

AUTH = {"authorization": bearer(hs256("tenant-a", ttl=3600))}


def policy(burst: int, **fields: Any) -> dict[str, Any]:
    return {
        "algorithm": "token_bucket",
        "rate": "1/minute",
        "burst": burst,
        "fail_mode": "closed",
        **fields,
    }


def sentinel() -> Sentinel:
    anonymous = {"identity": "anonymous", "network_rate": "10/minute", "network_burst": 10}
    return make_sentinel(
        {
            "redis_url": "memory://",
            "jwt": {"key": HS_SECRET},
            "anonymous": {"cookie_secret": COOKIE_SECRET},
            "policies": {
                "small": policy(1),
                "large": policy(3),
                "device": policy(2, **anonymous),
                "device.other": policy(2, **anonymous),
                "slots": {"algorithm": "concurrency", "limit": 1, "fail_mode": "closed"},
            },
        }
    )


def test_every_id_is_decided_and_the_fields_join_into_one_list_per_field() -> None:
    admission = sentinel().admit(request_view(headers=AUTH), ["large", "small"])

    assert admission.allowed
    fields = dict(admission.headers(200))
    assert fields["RateLimit"].startswith('"large";r=2;')
    assert ', "small";r=0;' in fields["RateLimit"]
    assert fields["RateLimit-Policy"].count(";q=") == 2
    assert [charge.policy.endpoint_id for charge in admission.charges] == ["large", "small"]


def test_the_first_denial_stops_the_admission_and_is_the_answer() -> None:
    limiter = sentinel()
    limiter.admit(request_view(headers=AUTH), ["small"])

    admission = limiter.admit(request_view(headers=AUTH), ["small", "large"])

    assert admission.denial is not None
    assert admission.denial.status == 429
    assert not admission.allowed
    # "large" was never decided: its bucket is untouched.
    after = limiter.admit(request_view(headers=AUTH), ["large"])
    assert dict(after.headers(200))["RateLimit"].startswith('"large";r=2;')


def test_a_missing_token_is_a_401_before_any_decision() -> None:
    limiter = sentinel()

    admission = limiter.admit(request_view(), ["large", "small"])

    assert admission.denial is not None
    assert admission.denial.status == 401
    after = limiter.admit(request_view(headers=AUTH), ["small"])
    assert after.allowed  # the 401 consumed nothing


def test_one_device_cookie_is_minted_for_every_anonymous_policy_of_a_request() -> None:
    admission = sentinel().admit(request_view(), ["device", "device.other"])

    cookie = admission.cookie(200)
    assert cookie is not None
    assert len({charge.identity.hash for charge in admission.charges}) == 1
    assert [c.outcome.cookie for c in admission.charges] == [cookie, cookie]
    # Both charge the network's new devices and the one device of the cookie set.
    device_id = cookie.value.split(".")[1]
    assert [getattr(c.identity, "minted", None) for c in admission.charges] == [device_id] * 2


def test_no_device_cookie_on_a_response_that_refuses_the_request() -> None:
    admission = sentinel().admit(request_view(), ["device"])

    assert [admission.cookie(status) for status in (401, 403, 429, 503)] == [None] * 4
    assert admission.cookie(404) is not None


def test_fields_of_two_admissions_of_one_request_join_too() -> None:
    limiter = sentinel()
    first = limiter.admit(request_view(headers=AUTH), ["large"])
    second = limiter.admit(request_view(), ["device"])

    headers, cookie = response_fields([first, second], 200)

    assert list(ratelimit_headers(headers)["state"]) == ["large", "device"]
    assert cookie is not None


def test_completion_runs_once_whatever_calls_it() -> None:
    admission = sentinel().admit(request_view(headers=AUTH), ["large"])

    admission.complete(SERVER_ERROR)
    admission.complete(200)

    assert admission.outcomes[0].allowed


async def test_the_async_lifecycle_follows_the_same_rules() -> None:
    limiter = sentinel()
    first = await limiter.aadmit(request_view(headers=AUTH), ["small"])
    second = await limiter.aadmit(request_view(headers=AUTH), ["large", "small"])

    await first.acomplete(CANCELLED)
    await first.acomplete(200)
    await second.acomplete(200)  # a denied admission settled itself

    assert first.allowed
    assert second.denial is not None
    assert second.denial.status == 429


def test_completion_hands_the_concurrency_lease_back_whatever_the_status() -> None:
    limiter = sentinel()
    held = limiter.admit(request_view(headers=AUTH), ["slots"])
    blocked = limiter.admit(request_view(headers=AUTH), ["slots"])

    held.complete(SERVER_ERROR)
    after = limiter.admit(request_view(headers=AUTH), ["slots"])

    assert held.allowed
    assert blocked.denial is not None
    assert blocked.denial.status == 429
    assert after.allowed


def test_only_an_admission_with_something_left_to_tell_the_store_owes_a_completion() -> None:
    limiter = sentinel()
    plain = limiter.admit(request_view(headers=AUTH), ["small"])
    denied = limiter.admit(request_view(headers=AUTH), ["small"])
    leased = limiter.admit(request_view(headers=AUTH), ["slots"])

    owed_before = leased.owes_completion
    leased.complete(200)

    assert (plain.allowed, denied.allowed) == (True, False)
    assert not plain.owes_completion
    assert not denied.owes_completion
    assert owed_before
    assert not leased.owes_completion, "a completed admission owes nothing more"


async def test_a_denial_on_a_later_id_hands_back_the_lease_taken_on_an_earlier_one() -> None:
    limiter = sentinel()
    await limiter.aadmit(request_view(headers=AUTH), ["small"])

    denied = await limiter.aadmit(request_view(headers=AUTH), ["slots", "small"])
    held = await limiter.aadmit(request_view(headers=AUTH), ["slots"])
    await held.acomplete(CANCELLED)
    again = await limiter.aadmit(request_view(headers=AUTH), ["slots"])

    assert not denied.allowed
    assert held.allowed  # the denied request's lease was not kept
    assert again.allowed


def test_joining_keeps_headers_that_are_not_lists_as_they_are() -> None:
    outcomes = [
        Outcome(True, 200, (("RateLimit", '"a";r=1'), ("X-Other", "1"))),
        Outcome(True, 200, (("RateLimit", '"b";r=2'),)),
    ]

    assert join_fields(outcomes) == [("RateLimit", '"a";r=1, "b";r=2'), ("X-Other", "1")]


def test_an_exempt_request_on_several_ids_is_charged_for_none() -> None:
    limiter = make_sentinel(
        {
            "redis_url": "memory://",
            "jwt": {"key": HS_SECRET},
            "exempt": {"tenants": ["tenant-a"]},
            "policies": {"small": policy(1), "large": policy(3)},
        }
    )

    for _ in range(3):
        admission = limiter.admit(request_view(headers=AUTH), ["small", "large"])
        assert admission.allowed
        assert admission.charges == ()
        assert admission.headers(200) == []


def test_the_straight_line_and_the_conversation_answer_alike() -> None:
    """One id without count or lease (given compiled here) takes the straight line,
    several ids the conversation: the same policy's outcome carries the same fields."""
    straight, talked = sentinel(), sentinel()

    one = straight.admit(request_view(headers=AUTH), [straight.endpoint("large")])
    two = talked.admit(request_view(headers=AUTH), ["large", "small"])

    assert one.charges[0].outcome.headers == two.charges[0].outcome.headers
    assert straight.admit(request_view(headers=AUTH), ["small"]).allowed
    denied = straight.admit(request_view(headers=AUTH), ["small"])
    assert denied.denial is not None
    assert denied.denial.status == 429
    assert denied.charges == ()


def test_a_withdrawn_admission_gives_its_lease_back_once_and_never_completes() -> None:
    """A later guard of the same request refused it (an adapter admitting in two
    steps): the admission ends as a refusal in one admission would, once."""
    limiter = sentinel()
    held = limiter.admit(request_view(headers=AUTH), ["slots"])

    held.withdraw()
    held.withdraw()
    held.complete(200)  # withdrawn: nothing more to do
    first = limiter.admit(request_view(headers=AUTH), ["slots"])
    second = limiter.admit(request_view(headers=AUTH), ["slots"])

    assert held.allowed
    assert first.allowed  # the withdrawn lease went back
    assert second.denial is not None  # and only once: first holds the one slot


async def test_an_async_withdrawal_follows_the_same_rules() -> None:
    limiter = sentinel()
    held = await limiter.aadmit(request_view(headers=AUTH), ["slots"])

    await held.acomplete(200)
    await held.awithdraw()  # completed: nothing more to do
    first = await limiter.aadmit(request_view(headers=AUTH), ["slots"])
    await first.awithdraw()
    second = await limiter.aadmit(request_view(headers=AUTH), ["slots"])

    assert first.allowed
    assert second.allowed  # the withdrawn lease went back
