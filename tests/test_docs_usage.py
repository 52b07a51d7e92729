"""docs/usage.md (Charging by usage): its worked example of the debt rule holds to the
second, and its code blocks parse."""

from __future__ import annotations

import ast
import re
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

import pytest
from prometheus_client import CollectorRegistry

from sentinel_core import Sentinel, load_config

PAGE = Path(__file__).resolve().parents[1] / "docs" / "usage.md"


class Clock:
    def __init__(self) -> None:
        self.now = 50.0

    def __call__(self) -> float:
        return self.now


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n```", PAGE.read_text("utf-8"), re.DOTALL)


@pytest.mark.parametrize("code", blocks("python"))
def test_the_page_s_python_parses(code: str) -> None:
    ast.parse(code)


def test_the_page_s_policies_load() -> None:
    (toml,) = blocks("toml")
    config = load_config({"redis_url": "memory://", **_table(toml)})
    assert config.policies["chat.completions"].settle
    assert config.policies["ocr.pages"].settle


def _table(toml: str) -> dict[str, object]:
    loaded: dict[str, object] = tomllib.loads(toml)["sentinel"]
    return loaded


def test_the_worked_example_denies_for_66_seconds() -> None:
    (toml,) = blocks("toml")
    clock = Clock()
    sentinel = Sentinel(
        {"redis_url": "memory://", **_table(toml)},
        registry=CollectorRegistry(),
        entry_points=False,
        clock=clock,
    )
    reservation = sentinel.reserve("chat.completions", "tenant")
    assert reservation.decision.remaining == 9000
    reservation.settle(25000)
    denied = sentinel.reserve("chat.completions", "tenant").decision
    assert denied.retry_after_seconds == 66
    clock.now += 65
    assert not sentinel.reserve("chat.completions", "tenant").decision.allowed
    clock.now += 1
    assert sentinel.reserve("chat.completions", "tenant").decision.allowed
