"""Sentinel: tenant-aware, endpoint-aware distributed rate limiting (framework-neutral core)."""

from sentinel_core._models import (
    Algorithm,
    Decision,
    DecisionReason,
    FailMode,
    IdentityKind,
    Policy,
    Rate,
)
from sentinel_core._sentinel import Sentinel
from sentinel_core.config._identity import AnonymousConfig, JwtConfig, JwtKey
from sentinel_core.config._schema import BreakerConfig, SentinelConfig, load_config
from sentinel_core.decision._engine import classify
from sentinel_core.errors import (
    ConfigError,
    ScriptMissingError,
    SentinelError,
    StartupError,
    UnknownEndpointError,
)
from sentinel_core.hookspecs import hookimpl
from sentinel_core.http._outcome import Cookie, Outcome, RequestView
from sentinel_core.identity._jwt import AuthError
from sentinel_core.identity._keys import AnonymousIdentity, Identity, TenantIdentity
from sentinel_core.observability._logging import DecisionLogPlugin
from sentinel_core.observability._metrics import MetricsPlugin
from sentinel_core.resilience._breaker import BreakerState, CircuitBreaker
from sentinel_core.resilience._emergency import EmergencyLimiter
from sentinel_core.store._connect import open_async_store, open_sync_store
from sentinel_core.store._protocol import Check, ServerReport
from sentinel_core.store._redis import MEMORY_URL, AsyncStore, SyncStore
from sentinel_core.store._reference import ScriptReply

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
