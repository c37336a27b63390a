"""`python -m vramtrace ...`: the same as the `vramtrace` command."""
import sys

from vramtrace._launcher import main

sys.exit(main())
