"""``python -m sentinel_core``: the ``sentinel`` command, for environments without the script."""

import sys

from ._cli import main

sys.exit(main())
