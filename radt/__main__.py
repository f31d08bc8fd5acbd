"""``python -m radt`` is the ``radt`` command."""

import sys

from radt.cli import main

sys.exit(main())
