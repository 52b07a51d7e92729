"""Where buckets live: the Lua scripts (`lua/`), the script protocol, the Redis, Redis
Cluster / Sentinel and memory stores, and the pure-Python reference twin of the scripts.

This is the only folder that imports redis-py; everything above it sees scripts, replies
and the core's own store errors.

May import: `sentinel_core._models`, `sentinel_core.errors`.
"""
