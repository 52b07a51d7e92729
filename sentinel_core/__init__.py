"""Sentinel: tenant-aware, endpoint-aware distributed rate limiting (framework-neutral core)."""

from ._algorithms import ScriptReply
from ._breaker import BreakerState, CircuitBreaker
from ._config import BreakerConfig, SentinelConfig, load_config
from ._config_identity import AnonymousConfig, JwtConfig, JwtKey
from ._connect import open_async_store, open_sync_store
from ._emergency import EmergencyLimiter
from ._engine import classify
from ._errors import (
    ConfigError,
    ScriptMissingError,
    SentinelError,
    StartupError,
    UnknownEndpointError,
)
from ._http import Cookie, Outcome, RequestView
from ._jwt import AuthError
from ._keys import AnonymousIdentity, Identity, TenantIdentity
from ._logging import DecisionLogPlugin
from ._metrics import MetricsPlugin
from ._models import Algorithm, Decision, DecisionReason, FailMode, IdentityKind, Policy, Rate
from ._protocol import Check, ServerReport
from ._sentinel import Sentinel
from ._stores import MEMORY_URL, AsyncStore, SyncStore
from .hookspecs import hookimpl

__all__ = [
    "MEMORY_URL",
    "Algorithm",
    "AnonymousConfig",
    "AnonymousIdentity",
    "AsyncStore",
    "AuthError",
    "BreakerConfig",
    "BreakerState",
    "Check",
    "CircuitBreaker",
    "ConfigError",
    "Cookie",
    "Decision",
    "DecisionLogPlugin",
    "DecisionReason",
    "EmergencyLimiter",
    "FailMode",
    "Identity",
    "IdentityKind",
    "JwtConfig",
    "JwtKey",
    "MetricsPlugin",
    "Outcome",
    "Policy",
    "Rate",
    "RequestView",
    "ScriptMissingError",
    "ScriptReply",
    "Sentinel",
    "SentinelConfig",
    "SentinelError",
    "ServerReport",
    "StartupError",
    "SyncStore",
    "TenantIdentity",
    "UnknownEndpointError",
    "classify",
    "hookimpl",
    "load_config",
    "open_async_store",
    "open_sync_store",
]

__version__ = "0.1.0"
