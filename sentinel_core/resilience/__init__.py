"""The resiliency triangle's process-local parts: the circuit breaker (one transition
table) and the emergency limiter. Both take an injectable monotonic clock; neither does
I/O.

May import: `sentinel_core._models`.
"""
