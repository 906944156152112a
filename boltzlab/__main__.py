"""``python -m boltzlab``: the ``boltzlab`` command line."""

import sys

from boltzlab.dashboard.cli import main

if __name__ == "__main__":
    sys.exit(main())
