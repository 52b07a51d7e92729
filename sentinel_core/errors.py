"""Sentinel's exceptions: one base class, data on the exception, not only in the message."""

from __future__ import annotations

from redis.exceptions import NoScriptError


class SentinelError(Exception):
    """Base class of every error Sentinel raises on purpose."""


class ConfigError(SentinelError, ValueError):
    """A configuration value is missing, unknown or invalid.

    ``path`` is the full dotted key path (``policies.pdftalk.ingest.rate``), so the
    message always says where to look.
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path}: {problem}" if path else problem)


class StartupError(SentinelError):
    """The Redis server is reachable but unfit for Sentinel (eviction policy, maxmemory, ...)."""


class ScriptMissingError(SentinelError, NoScriptError):
    """A Lua script was still missing after one reload (NOSCRIPT twice in a row).

    A `redis.exceptions.RedisError`, so the decision table classifies it like any Redis
    failure: ``redis_noscript_retry``.
    """


class UnknownEndpointError(SentinelError, KeyError):
    """An endpoint id was evaluated that no policy in the configuration declares."""

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        super().__init__(endpoint_id)

    def __str__(self) -> str:
        return f"unknown endpoint id {self.endpoint_id!r}: no policy declares it"
