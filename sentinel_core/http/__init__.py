"""The framework-neutral HTTP outcome of SPEC §4: a request view in, status, headers,
cookie and problem body out. Every adapter calls this; none re-implements it.
"""
