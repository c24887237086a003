"""Child process of the compilation-cache test: one tiny model, one prefill step, on XLA:CPU.
Prints the step's compile record as JSON. Run as `python -m tests.tpu.compile_cache_child DIR` from the
repository root."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sglang.platforms import select_platform

from .tiny_models import Feeder, checkpoint, runner_for

if __name__ == "__main__":
    ckpt = checkpoint("llama", Path(sys.argv[1]))
    runner = runner_for(ckpt, select_platform("tpu"))
    Feeder(runner, ckpt.prompts).step([(0, 0, 5)])
    (record,) = runner.step_runner.records
    print(json.dumps({"shape": str(record.shape), "compile_s": record.compile_s}))
