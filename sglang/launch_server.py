"""`python -m sglang.launch_server --model-path ...`, as SGLang users type it: `sglang serve`."""

import sys

from sglang.cli import main

if __name__ == "__main__":
    sys.exit(main(["serve", *sys.argv[1:]]))
