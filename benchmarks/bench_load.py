"""Load-time benchmark: the embedded GGUF model through our loader vs transformers' GGUF loading.

Rows (seconds, one run each, same process, imports done beforehand so no row pays for them):
- ours cold: `open_model_source` with an empty cache (GGUF parse, dequantize, write the cache
  folder, build the tokenizer files) plus reading every weight tensor;
- ours warm: the same with the cache populated (validate headers, read weights);
- ours tokenizer: `ModelSource.load_tokenizer()` from the cache folder;
- transformers tokenizer / model: `from_pretrained(folder, gguf_file=...)`.
The ratio column is the transformers time divided by ours for the matching row.

    .venv/bin/python benchmarks/bench_load.py [--dtype float32] [--skip-transformers]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gguf  # noqa: F401  (imported up front so that no timed row pays for it)
import torch
import transformers  # noqa: F401

from sglang.runtime.loader import embedded_model_path, open_model_source


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def open_and_read(cache: Path, dtype: str) -> float:
    def run() -> list[torch.Tensor]:
        source = open_model_source(None, dtype, cache_dir=cache)
        # Tensors may be lazy views of the memory-mapped file; copying them is what filling a model costs.
        return [t.clone() for _, t in source.weights()]

    seconds, _ = timed(run)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--skip-transformers", action="store_true")
    args = parser.parse_args()
    path = embedded_model_path()
    rows: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        cache = Path(tmp)
        rows["ours cold (convert + read weights)"] = open_and_read(cache, args.dtype)
        rows["ours warm (open + read weights)"] = open_and_read(cache, args.dtype)
        source = open_model_source(None, args.dtype, cache_dir=cache)
        rows["ours tokenizer"], _ = timed(source.load_tokenizer)
    if not args.skip_transformers:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        folder, name = str(path.parent), path.name
        rows["transformers tokenizer (gguf_file)"], _ = timed(
            lambda: AutoTokenizer.from_pretrained(folder, gguf_file=name)
        )
        dtype = getattr(torch, args.dtype)
        rows["transformers model (gguf_file)"], _ = timed(
            lambda: AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=dtype)
        )
    pairs = {
        "ours cold (convert + read weights)": "transformers model (gguf_file)",
        "ours warm (open + read weights)": "transformers model (gguf_file)",
        "ours tokenizer": "transformers tokenizer (gguf_file)",
    }
    print(f"\n{path.name}, dtype {args.dtype}, torch threads {torch.get_num_threads()}")
    print(f"{'step':<38} {'seconds':>8} {'transformers / ours':>20}")
    for step, seconds in rows.items():
        other = rows.get(pairs.get(step, ""))
        ratio = f"{other / seconds:.1f}x" if other else ""
        print(f"{step:<38} {seconds:>8.2f} {ratio:>20}")


if __name__ == "__main__":
    main()
