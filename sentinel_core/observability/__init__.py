"""Prometheus metrics and structured decision logs, both registered as built-in pluggy
plugins on `sentinel_decision`.
"""
