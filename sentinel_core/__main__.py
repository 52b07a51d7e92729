"""``python -m sentinel_core``: the ``sentinel`` command, for environments without the script."""

import sys

from sentinel_core.cli._main import main

sys.exit(main())
