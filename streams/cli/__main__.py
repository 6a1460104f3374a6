"""`python -m streams.cli`: the command line, as the `claimstream` console script runs it."""

import sys

from streams.cli.main import main

sys.exit(main())
