"""``python -m samprof``: the samprof command line (see samprof.cli)."""

import sys

from samprof.cli import main

if __name__ == "__main__":
    sys.exit(main())
