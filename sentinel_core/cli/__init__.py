"""The `sentinel` command line: `check`, `demo` and friends. User mistakes are one line on
stderr and exit 2, never a traceback.
"""

from sentinel_core.cli._main import main

__all__ = ["main"]
