"""The decision table of SPEC §3: a script reply or a store failure, plus the breaker and
the emergency limiter, become one `Decision`. I/O-free: it drives the store through the
sync and async shells of the facade.
"""
