"""Prometheus metrics and structured decision logs, both registered as built-in pluggy
plugins on `sentinel_decision`.

May import: `sentinel_core._models`, `sentinel_core.hookspecs`, `sentinel_core.resilience`.
"""
