"""``python -m sapporo.cli``: the ``sapporo`` command."""

import sys

from sapporo.cli import main

sys.exit(main())
