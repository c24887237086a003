"""`python -m sglang ...` is the `sglang` command."""

import sys

from sglang.cli import main

sys.exit(main())
