"""The figures the real-server suite measured, for its terminal summary and JSON report."""

from __future__ import annotations

from typing import Any

FIGURES: dict[str, dict[str, dict[str, Any]]] = {}
"""deployment -> scenario -> figure -> value"""


def record(deployment: str, scenario: str, **values: Any) -> None:
    FIGURES.setdefault(deployment, {}).setdefault(scenario, {}).update(values)


def milliseconds(seconds: float) -> float:
    return round(seconds * 1000, 1)
