"""``python -m ltrr.cli``: the ``ltrr`` command."""

import sys

from ltrr.cli import main

sys.exit(main())
