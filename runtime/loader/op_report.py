"""`sglang ops`: the op table a server would bind, without loading weights.

For a device this machine has, the table is what `sglang serve` binds (packages checked for
real). For one it lacks, the table is the platform's declaration: vendor packages are assumed
importable unless named in `assume_missing`, and the table is headed by why the device is
unavailable here.

A Hugging Face folder is read for its config.json alone, so a deployment can be planned from a
config before any weights are downloaded; a GGUF file (or the embedded model) is opened, since
its config is part of the file.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from sglang.ops.selection import OpTable
from sglang.platforms import Platform, platform_class, select_platform
from sglang.runtime.loader.dtype import resolve_dtype
from sglang.runtime.loader.hf_folder import read_config
from sglang.runtime.loader.model_loading import model_facts, open_source
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.server_args import ServerArgs


def planned_model(args: ServerArgs, platform: Platform) -> tuple[torch.dtype, ModelConfig]:
    """The dtype and config a server would load, reading no weights."""
    folder = Path(args.model_path).expanduser() if args.model_path is not None else None
    if folder is None or not folder.is_dir():
        source, config = open_source(args, platform)
        return source.dtype, config
    raw = read_config(folder)
    caps = platform.capabilities
    dtype = resolve_dtype(args.dtype, raw, caps.default_dtype, caps.dtypes)
    platform.check_dtype(dtype)
    return dtype, ModelConfig.from_dict(raw)


def op_table(args: ServerArgs, assume_missing: Sequence[str] = ()) -> OpTable:
    platform = select_platform() if args.device == "auto" else platform_class(args.device)()
    dtype, config = planned_model(args, platform)
    return platform.select_ops(
        model_facts(args, dtype, config),
        args.op_overrides(),
        force_reference=True if args.reference_ops else None,
        assume_missing=assume_missing,
    )
