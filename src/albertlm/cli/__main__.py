"""`python -m albertlm.cli`: the same as the `albertlm` command."""

import sys

from albertlm.cli import main

sys.exit(main())
