"""Which configuration a command reads: the CONFIG file of ``sentinel``, or the mapping
an app hands over (``flask sentinel``: ``app.config["SENTINEL"]``; ``manage.py
sentinel``: ``settings.SENTINEL``). One implementation serves all three.

``peek``, ``reset`` and ``usage`` load only what they use: the store's settings, the
one policy named, and the ``anonymous`` section when that policy needs it. Never
``jwt``: an operator resetting a tenant's bucket needs no token secret (nor the cookie
secret, for a tenant policy), and a support machine should not hold them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sentinel_core.config._schema import SentinelConfig, load_config, read_table
from sentinel_core.errors import UnknownEndpointError

_UNUSED_BY_ADMIN = frozenset({"jwt", "routes"})


def admin_config(source: Mapping[str, Any] | str, endpoint_id: str) -> SentinelConfig:
    """The configuration ``peek``, ``reset`` and ``usage`` of ``endpoint_id`` need.

    Raises:
        ConfigError: the file cannot be read, or what is kept is invalid.
        UnknownEndpointError: no policy has that id.
    """
    table = {key: value for key, value in read_table(source).items() if key not in _UNUSED_BY_ADMIN}
    policies = table.get("policies")
    if isinstance(policies, Mapping):  # anything else: the loader says what is wrong
        if endpoint_id not in policies:
            raise UnknownEndpointError(endpoint_id)
        entry = policies[endpoint_id]
        table["policies"] = {endpoint_id: entry}
        if isinstance(entry, Mapping) and entry.get("identity", "tenant") == "tenant":
            table.pop("anonymous", None)
    return load_config(table)
