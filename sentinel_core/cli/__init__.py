"""The `sentinel` command line: `check`, `demo` and friends. User mistakes are one line on
stderr and exit 2, never a traceback.

`app_main` and `add_app_commands` are for the adapters' own command lines (``flask
sentinel``, ``manage.py sentinel``): the same commands on the configuration the app
hands over.

May import: `sentinel_core._models`, `sentinel_core.errors`, `sentinel_core._sentinel`,
`sentinel_core.config`, `sentinel_core.decision`, `sentinel_core.http`,
`sentinel_core.identity`, `sentinel_core.store`.
"""

from sentinel_core.cli._main import add_app_commands, app_main, main, run

__all__ = ["add_app_commands", "app_main", "main", "run"]
