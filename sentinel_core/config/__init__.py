"""Strict configuration: the schema of SPEC §2 read into frozen values, every error naming
its key path. Nothing here does I/O beyond reading a TOML file or an environment
variable at load.

May import: `sentinel_core._models`, `sentinel_core.errors`, `sentinel_core.store` (its
URL parsing).
"""
