"""A GGUF file as a model source: converted once into a cached Hugging Face folder, then reused.

The first open of a file reads it with gguf's reader, builds config.json from its metadata,
dequantizes and un-permutes every tensor into one float32 `model.safetensors` (streamed, so memory
peaks at one tensor; a tqdm bar shows progress on a terminal), and saves the tokenizer (with its
chat template) next to them. Later opens only validate that folder's safetensors header and never
touch the GGUF file again: reloading the cached copy takes well under a second where the GGUF
path takes several seconds.

The cache holds float32 whatever dtype the run asks for: that is exact for every GGUF block format
and makes one cache entry serve every dtype (the price: 4 bytes a parameter on disk, 540 MB for
the embedded 135M model; MXFP4 tensors take 2, in bfloat16, as exactly: see gguf_tensors).
Casting happens when `ModelSource.weights()` yields.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections import Counter
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .cache import FORMAT_VERSION, cache_root, entry_name, publish
from .errors import MissingFileError, ModelLoadError
from .gguf_config import architecture_info, gguf_to_hf_config
from .gguf_file import GGUFFile
from .gguf_quantized import DENSE_TYPES
from .gguf_tensors import iter_hf_tensors, tensor_specs
from .hf_folder import SINGLE_FILE, ModelSource, open_hf_folder
from .safetensors_file import write_streaming
from .tokenizer import save_gguf_tokenizer

logger = logging.getLogger(__name__)


def convert_gguf(gguf_path: Path, out_dir: Path) -> None:
    """Write the Hugging Face folder equivalent of `gguf_path` into the (empty) directory `out_dir`."""
    started = time.perf_counter()
    gf = GGUFFile.open(gguf_path)
    info = architecture_info(gf)
    config = gguf_to_hf_config(gf)
    specs = tensor_specs(gf, info)
    tensors = tqdm(
        iter_hf_tensors(gf, info, config),
        total=len(specs),
        desc=f"Converting {gguf_path.name}",
        unit="tensor",
        disable=None,
    )
    write_streaming(out_dir / SINGLE_FILE, specs, tensors, metadata={"format": "pt", "source": gguf_path.name})
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_gguf_tokenizer(gguf_path, gf.metadata, out_dir)
    provenance = {"source": str(gguf_path.resolve()), "format_version": FORMAT_VERSION, "tensors": len(specs)}
    (out_dir / "source.json").write_text(json.dumps(provenance, indent=2) + "\n")
    logger.info("converted %s (%d tensors) in %.1f s", gguf_path.name, len(specs), time.perf_counter() - started)
    quantized = Counter(t.tensor_type.name for t in gf.tensors.values() if t.tensor_type not in DENSE_TYPES)
    if quantized:
        shown = ", ".join(f"{kind} ({n} tensors)" for kind, n in sorted(quantized.items()))
        logger.info("%s: quantized tensors dequantized to float32 at load: %s", gguf_path.name, shown)


def cached_folder(gguf_path: Path, root: Path | None = None) -> Path:
    """The cache folder for `gguf_path`, converting it first if it is not cached yet."""
    if not gguf_path.is_file():
        raise MissingFileError(f"GGUF file {gguf_path} does not exist")
    target = (root or cache_root("gguf")) / entry_name(gguf_path)
    if target.is_dir():
        return target
    logger.info("converting %s once into %s", gguf_path, target)
    return publish(target, lambda tmp: convert_gguf(gguf_path, tmp))


def open_gguf(gguf_path: Path, dtype: torch.dtype, root: Path | None = None) -> ModelSource:
    """Open `gguf_path` through its cache folder; a damaged cache entry is rebuilt once."""
    folder = cached_folder(gguf_path, root)
    try:
        return open_hf_folder(folder, dtype, origin=gguf_path)
    except ModelLoadError as exc:
        logger.warning("cached conversion %s is unusable (%s); rebuilding it", folder, exc)
        shutil.rmtree(folder, ignore_errors=True)
        return open_hf_folder(cached_folder(gguf_path, root), dtype, origin=gguf_path)
