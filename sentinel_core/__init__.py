"""Sentinel: tenant-aware, endpoint-aware distributed rate limiting (framework-neutral core).

The names a user's code needs: the facade, its configuration and values, the errors,
and what a plugin receives or returns. What framework adapters need lives in
`sentinel_core.adapter`; everything else is private to the package.
"""

from sentinel_core._models import (
    Algorithm,
    Decision,
    DecisionReason,
    FailMode,
    IdentityKind,
    Policy,
    Rate,
)
from sentinel_core._reservation import Reservation
from sentinel_core._sentinel import Sentinel
from sentinel_core.config._schema import SentinelConfig, load_config
from sentinel_core.decision._usage import Usage
from sentinel_core.errors import (
    ConfigError,
    SentinelError,
    StartupError,
    StoreError,
    UnknownEndpointError,
)
from sentinel_core.hookspecs import hookimpl
from sentinel_core.http._meter import settle
from sentinel_core.http._outcome import RequestView
from sentinel_core.identity._keys import AnonymousIdentity, Identity, TenantIdentity
from sentinel_core.resilience._breaker import BreakerState

__all__ = [
    "Algorithm",
    "AnonymousIdentity",
    "BreakerState",
    "ConfigError",
    "Decision",
    "DecisionReason",
    "FailMode",
    "Identity",
    "IdentityKind",
    "Policy",
    "Rate",
    "RequestView",
    "Reservation",
    "Sentinel",
    "SentinelConfig",
    "SentinelError",
    "StartupError",
    "StoreError",
    "TenantIdentity",
    "UnknownEndpointError",
    "Usage",
    "hookimpl",
    "load_config",
    "settle",
]

__version__ = "0.1.0"
