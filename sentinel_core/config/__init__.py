"""Strict configuration: the schema of SPEC §2 read into frozen values, every error naming
its key path.

Modules here import only `sentinel_core._models` and `sentinel_core.errors` (plus the
store's URL parsing); nothing here does I/O beyond reading a TOML file or an environment
variable at load.
"""
