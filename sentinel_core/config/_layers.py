"""Layered limits (SPEC §2): ``rates = ["10/second", "1000/day"]`` instead of ``rate``.

Every limit must allow, all decided in one script call: one bucket per limit, the first
limit's bucket under the policy's usual key (so adding limits to a policy keeps its
first bucket). Each limit's capacity is its own count.
"""

from __future__ import annotations

from sentinel_core._models import Algorithm, IdentityKind, Rate
from sentinel_core.config._reader import Section, parse_rate
from sentinel_core.errors import ConfigError


def parse_rates(
    section: Section, algorithm: Algorithm, identity: IdentityKind
) -> tuple[Rate, tuple[Rate, ...]]:
    """The policy's first rate and its further layers (none without ``rates``)."""
    if not section.has("rates"):
        if not section.has("rate"):
            raise ConfigError(section.path("rate"), "missing key")
        return parse_rate(section.raw("rate"), section.path("rate")), ()
    path = section.path("rates")
    if section.has("rate"):
        raise ConfigError(path, "give either rate or rates, not both")
    texts = section.raw("rates")
    if not isinstance(texts, list) or not texts:
        raise ConfigError(path, 'expected a non-empty list such as ["10/second", "1000/day"]')
    for key in ("burst", "network_rate", "network_burst"):
        if section.has(key):
            raise ConfigError(section.path(key), "does not combine with rates (layered limits)")
    if identity is IdentityKind.ANONYMOUS:
        raise ConfigError(path, "layered limits apply to tenant policies")
    rates = [parse_rate(text, f"{path}[{index}]") for index, text in enumerate(texts)]
    periods = [rate.period_seconds for rate in rates]
    if len(set(periods)) != len(periods):
        raise ConfigError(path, "two limits per unit: give one limit per second, minute, ...")
    return rates[0], tuple(rates[1:])
