"""The `sentinel` command line: `check`, `demo` and friends. User mistakes are one line on
stderr and exit 2, never a traceback.

May import: `sentinel_core._models`, `sentinel_core.errors`, `sentinel_core._sentinel`,
`sentinel_core.config`, `sentinel_core.decision`, `sentinel_core.http`,
`sentinel_core.store`.
"""

from sentinel_core.cli._main import main

__all__ = ["main"]
