"""``fallback_scope`` (SPEC §2): whether a fail-open policy's ``fallback_rate`` is each
process's, or the whole fleet's, shared out by the live process count of the heartbeat."""

from __future__ import annotations

from sentinel_core._models import Algorithm, FailMode, FallbackScope
from sentinel_core.config._reader import Section
from sentinel_core.errors import ConfigError

FLEET_HEARTBEAT_SECONDS = 5
MAX_FLEET_HEARTBEAT_SECONDS = 3_600


def parse_fallback_scope(
    section: Section, algorithm: Algorithm, fail_mode: FailMode
) -> FallbackScope:
    if not section.has("fallback_scope"):
        return FallbackScope.PROCESS
    path, value = section.path("fallback_scope"), section.raw("fallback_scope")
    if value not in ("process", "fleet"):
        raise ConfigError(path, f"expected 'process' or 'fleet', got {value!r}")
    if fail_mode is not FailMode.OPEN:
        raise ConfigError(path, "applies to fail_mode open only")
    scope = FallbackScope(value)
    if scope is FallbackScope.FLEET and algorithm is Algorithm.CONCURRENCY:
        raise ConfigError(
            path,
            "concurrency policies fail open with `fallback_limit`, requests in flight per "
            "process; 'fleet' shares a fallback_rate",
        )
    return scope
