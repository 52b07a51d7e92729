"""`frozen_builder`: the fast constructors of the values built on every request give
the very values their classes' own constructors give: same type, equal, same hash,
immutable, picklable."""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest

from sentinel_core import load_config
from sentinel_core._models import Decision, DecisionReason, build_decision
from sentinel_core.http._lifecycle import Charge, build_charge
from sentinel_core.http._outcome import Outcome, Prepared, build_outcome, build_prepared
from sentinel_core.identity._keys import tenant_identity
from sentinel_core.store._scripts import ScriptCall, build_script_call

BUCKET = {"algorithm": "token_bucket", "rate": "10/minute", "fail_mode": "closed"}
POLICY = load_config({"redis_url": "memory://", "policies": {"api.x": BUCKET}}).policies["api.x"]


def _decision_args() -> tuple[object, ...]:
    return (True, DecisionReason.ALLOWED, "api.x", 10, 9, None, 1, POLICY, "h" * 22, 42)


@pytest.mark.parametrize(
    ("cls", "build", "args", "kwargs"),
    [
        (Decision, build_decision, _decision_args(), {"limit_index": 1}),
        (ScriptCall, build_script_call, ("token_bucket", ("k",), (0, 1, 2)), {}),
        (Outcome, build_outcome, (True, 200, (("RateLimit", "x"),)), {"body": b"b"}),
        (Prepared, build_prepared, (tenant_identity("acme"), None), {}),
        (Charge, build_charge, (POLICY, tenant_identity("acme"), None), {}),
    ],
    ids=lambda value: getattr(value, "__name__", ""),
)
def test_a_built_value_is_the_class_own(
    cls: type, build: object, args: tuple[object, ...], kwargs: dict[str, object]
) -> None:
    made, built = cls(*args, **kwargs), build(*args, **kwargs)  # type: ignore[operator]

    assert type(built) is cls
    assert isinstance(built, cls)
    assert built == made
    assert hash(built) == hash(made)
    assert repr(built) == repr(made)
    assert dataclasses.astuple(built) == dataclasses.astuple(made)
    assert copy.copy(built) == made
    name = dataclasses.fields(cls)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(built, name, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(built, name)


def test_a_built_decision_pickles_and_replaces_like_a_made_one() -> None:
    built = build_decision(*_decision_args()[:9])
    assert pickle.loads(pickle.dumps(dataclasses.replace(built, policy=None))) == (
        dataclasses.replace(Decision(*_decision_args()[:9]), policy=None)
    )
    assert dataclasses.replace(built, remaining=0).remaining == 0
    assert built.latency_us == 0  # the defaults
    assert built.store_failure is None
