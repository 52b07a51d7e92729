"""Sentinel's exceptions: one base class, data on the exception, not only in the message.

The store errors (`StoreError` and its subclasses) are what the decision table
classifies. The stores translate redis-py's exceptions into them at one boundary
(`sentinel_core.store._errors`), so nothing above the store imports redis-py.
"""

from __future__ import annotations


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


class StoreError(SentinelError):
    """The store gave no usable answer: SPEC §3's failure rows.

    Raised only by the stores, translated from the driver's exception (kept as
    ``__cause__``).
    """


class StoreUnavailableError(StoreError):
    """The store could not be reached, dropped the connection or refused the command:
    ``redis_connection_error``."""


class StoreTimeoutError(StoreUnavailableError):
    """The store did not answer within ``socket_timeout_ms``: ``redis_timeout``."""


class ScriptMissingError(StoreUnavailableError):
    """A Lua script was still missing after one reload (NOSCRIPT twice in a row):
    ``redis_noscript_retry``."""


class StoreDataError(StoreError):
    """The store answered, but a bucket's stored value made the script fail (a key of the
    wrong type written by someone else). The store is healthy: this never counts toward
    the circuit breaker."""


class UnknownEndpointError(SentinelError, KeyError):
    """An endpoint id was evaluated that no policy in the configuration declares."""

    def __init__(self, endpoint_id: str) -> None:
        self.endpoint_id = endpoint_id
        super().__init__(endpoint_id)

    def __str__(self) -> str:
        return f"unknown endpoint id {self.endpoint_id!r}: no policy declares it"
