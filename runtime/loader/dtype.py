"""Choosing the dtype weights are loaded in.

`resolve_dtype` turns the user's `--dtype` choice into a `torch.dtype`:

- an explicit name (`float32`/`fp32`/`float`, `bfloat16`/`bf16`, `float16`/`fp16`/`half`) or a
  `torch.dtype` is used as given; whether the platform can run it is the platform's check
  (`Platform.check_dtype`), not this function's;
- `auto` takes the checkpoint's own dtype (`dtype`, or the older `torch_dtype`, in config.json)
  when it is a floating dtype the platform supports, and the platform's default otherwise
  (quantized GGUF files declare no dtype, so they get the platform default).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import torch

_NAMES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "float": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
    "half": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    """The dtype a user-facing name stands for; raises ValueError listing the accepted names."""
    key = name.strip().lower().removeprefix("torch.")
    if key not in _NAMES:
        raise ValueError(f"unknown dtype {name!r}; choose auto or one of: {', '.join(_NAMES)}")
    return _NAMES[key]


def config_dtype(config: Mapping[str, Any]) -> torch.dtype | None:
    """The floating dtype config.json declares, or None when it declares none we know."""
    declared = config.get("dtype") or config.get("torch_dtype")
    if not isinstance(declared, str):
        return None
    return _NAMES.get(declared.strip().lower().removeprefix("torch."))


def resolve_dtype(
    choice: str | torch.dtype,
    config: Mapping[str, Any],
    platform_default: torch.dtype,
    supported: Collection[torch.dtype] | None = None,
) -> torch.dtype:
    """Resolve `choice` ("auto", a dtype name, or a dtype) against the checkpoint config.

    `supported` is the platform's supported dtypes; None means "anything", so `auto` then always
    follows the checkpoint when it declares a dtype.
    """
    if isinstance(choice, torch.dtype):
        return choice
    if choice.strip().lower() != "auto":
        return parse_dtype(choice)
    declared = config_dtype(config)
    if declared is not None and (supported is None or declared in supported):
        return declared
    return platform_default
