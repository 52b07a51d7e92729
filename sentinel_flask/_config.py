"""Where an app keeps its Sentinel configuration: ``app.config["SENTINEL"]`` (a mapping)
or ``app.config["SENTINEL_CONFIG_FILE"]`` (a TOML file), read by ``init_app`` and by
the ``flask sentinel`` commands alike."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from flask import Flask

from sentinel_core import ConfigError

CONFIG_KEY = "SENTINEL"
CONFIG_FILE_KEY = "SENTINEL_CONFIG_FILE"


def config_source(app: Flask) -> Mapping[str, Any] | str:
    """The app's configuration: the mapping, or the TOML file's path (relative paths
    from ``app.root_path``, as in ``app.config.from_file``).

    Raises:
        ConfigError: neither key is set, both are, or the mapping is not one.
    """
    mapping = app.config.get(CONFIG_KEY)
    path = app.config.get(CONFIG_FILE_KEY)
    if mapping is not None and path is not None:
        raise ConfigError(CONFIG_FILE_KEY, f"set app.config[{CONFIG_KEY!r}] or this key, not both")
    if mapping is not None:
        if not isinstance(mapping, Mapping):
            raise ConfigError(CONFIG_KEY, f"expected a mapping, got {type(mapping).__name__}")
        return mapping
    if path is not None:
        return os.path.join(app.root_path, os.fspath(path))
    raise ConfigError(
        CONFIG_KEY,
        f"missing: set app.config[{CONFIG_KEY!r}] (a mapping) or "
        f"app.config[{CONFIG_FILE_KEY!r}] (a TOML file with a [sentinel] table)",
    )


def describe_source(app: Flask) -> str:
    """How the ``flask sentinel`` commands name the app's configuration."""
    if app.config.get(CONFIG_KEY) is not None:
        return f"app.config[{CONFIG_KEY!r}]"
    return f"app.config[{CONFIG_FILE_KEY!r}] ({config_source(app)})"
