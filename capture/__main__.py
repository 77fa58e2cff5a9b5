"""Entry point of ``python -m capture`` (and ``python -m tracekit.capture``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
