"""`python -m schedulearn …`: the same as the `schedulearn` command."""

import sys

from .cli import main

sys.exit(main())
