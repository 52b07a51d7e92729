"""Layered limits (SPEC §2): ``rates = ["10/second", "1000/day"]`` instead of ``rate``.

Every limit must allow, all decided in one script call: one bucket per limit, the first
limit's bucket under the policy's usual key (so adding limits to a policy keeps its
first bucket). Each limit's capacity is its own count.

An anonymous policy (and a user policy's anonymous fallback) layers both of its buckets
alike: the device's limits are ``rates``, the network's ``network_rates`` (one per
limit, in the same units), by default ten devices' worth of each.
"""

from __future__ import annotations

from sentinel_core._models import Rate
from sentinel_core.config._reader import Section, parse_rate
from sentinel_core.errors import ConfigError


def parse_rates(section: Section) -> tuple[Rate, tuple[Rate, ...]]:
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
    for key in ("burst", "network_rate", "network_burst"):  # network_rates instead
        if section.has(key):
            raise ConfigError(section.path(key), "does not combine with rates (layered limits)")
    rates = [parse_rate(text, f"{path}[{index}]") for index, text in enumerate(texts)]
    periods = [rate.period_seconds for rate in rates]
    if len(set(periods)) != len(periods):
        raise ConfigError(path, "two limits per unit: give one limit per second, minute, ...")
    return rates[0], tuple(rates[1:])


def parse_network_rates(section: Section, rates: tuple[Rate, ...], share: int) -> tuple[Rate, ...]:
    """The network's limits of a layered anonymous (or user) policy: ``network_rates``,
    one per limit of ``rates`` in the same unit, or ``share`` devices' worth of each."""
    if not section.has("network_rates"):
        return tuple(Rate(rate.count * share, rate.period_seconds) for rate in rates)
    path = section.path("network_rates")
    texts = section.raw("network_rates")
    if not isinstance(texts, list) or len(texts) != len(rates):
        raise ConfigError(path, f"expected a list of {len(rates)} limits, one per entry of rates")
    network = tuple(parse_rate(text, f"{path}[{index}]") for index, text in enumerate(texts))
    for index, (mine, device) in enumerate(zip(network, rates, strict=True)):
        if mine.period_seconds != device.period_seconds:
            raise ConfigError(
                f"{path}[{index}]", f"must be in the unit of rates[{index}] ({device})"
            )
    return network
