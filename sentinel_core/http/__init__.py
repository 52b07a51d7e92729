"""The framework-neutral HTTP outcome of SPEC §4: a request view in, status, headers,
cookie and problem body out. Every adapter calls this; none re-implements it.

May import: `sentinel_core._memo`, `sentinel_core._models`, `sentinel_core.errors`,
`sentinel_core._plugins`, `sentinel_core.config`, `sentinel_core.decision` (compiled
endpoints), `sentinel_core.identity`, `sentinel_core.resilience`.
"""
