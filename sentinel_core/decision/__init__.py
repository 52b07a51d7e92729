"""The decision table of SPEC §3: a script reply or a store failure, plus the breaker and
the emergency limiter, become one `Decision`. I/O-free: it drives the store through the
sync and async shells of the facade.

May import: `sentinel_core._memo`, `sentinel_core._models`, `sentinel_core.errors`,
`sentinel_core._plugins`, `sentinel_core.identity`, `sentinel_core.resilience`,
`sentinel_core.store` (the script protocol, never a connection).
"""
