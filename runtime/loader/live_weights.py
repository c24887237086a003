"""The running model's weights: replaced in place from another checkpoint of the same model
(upstream's `/update_weights_from_disk`) or from tensors by checkpoint name
(`update_weights_from_tensor`), and read back by checkpoint name (`/get_weights_by_name`).

Invariant of `reload_weights`: every tensor the model computes with keeps its storage, so what
holds it by address (a captured step's tape, a traced graph, a kernel's weight layout) reads the
new values without being rebuilt. The new checkpoint is built into a second model exactly as the
first was loaded (the same plan of weight formats, the kernels' layouts primed by the same bound
ops), checked tensor by tensor against the running one, and only then copied over: a checkpoint
that does not fit changes nothing. Building it costs a second copy of the weights while it runs.
"""

from __future__ import annotations

import gc
from dataclasses import fields, replace
from typing import Any

import torch
from torch import nn

from sglang.ops.quant import QuantizedWeight
from sglang.platforms import Platform
from sglang.runtime.loader.errors import ModelLoadError
from sglang.runtime.loader.model_loading import build_model, open_source
from sglang.runtime.loader.weight_plan import weight_plan
from sglang.runtime.models.weights import checkpoint_map
from sglang.runtime.server_args import ServerArgs


class WeightUpdateError(ValueError):
    """The checkpoint cannot replace the running weights (nothing was changed)."""


def model_tensors(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor `model` computes with, by a name that is the same in any model built from the
    same config and plan: parameters, buffers, quantized weights' data, scales, offsets and
    kernel layouts, and tensors kept as plain attributes (rotary tables)."""
    tensors: dict[str, torch.Tensor] = {}
    for path, module in model.named_modules():
        prefix = f"{path}." if path else ""
        for name, value in module.__dict__.items():
            if isinstance(value, torch.Tensor):
                tensors[prefix + name] = value
            elif isinstance(value, QuantizedWeight):
                for part in ("qdata", "scales", "offsets"):
                    if (tensor := getattr(value, part)) is not None:
                        tensors[f"{prefix}{name}.{part}"] = tensor
                for kernel, layout in value.kernel_layouts.items():
                    tensors[f"{prefix}{name}[{kernel}]"] = layout
        for name, tensor in [*module._parameters.items(), *module._buffers.items()]:
            if tensor is not None:
                tensors[prefix + name] = tensor
    return tensors


def reload_weights(model: nn.Module, platform: Platform, args: ServerArgs, model_path: str) -> None:
    """Fills `model` (loaded from `args`) in place with the weights at `model_path`, which must be
    the same architecture with the same shapes and weight formats. Raises WeightUpdateError
    before changing anything when it is not."""
    new_args = replace(args, model_path=model_path)
    try:
        source, config = open_source(new_args, platform)
    except (ModelLoadError, OSError, ValueError) as e:
        raise WeightUpdateError(f"cannot open {model_path}: {e}") from e
    if config != model.config:
        differing = [
            f.name for f in fields(config) if f.compare and getattr(config, f.name) != getattr(model.config, f.name)
        ]
        raise WeightUpdateError(f"{model_path} is a different model: its config differs in {differing[:5]}")
    try:
        fresh = build_model(source, config, weight_plan(source, args.dtype, args.quantization), platform)
    except (ModelLoadError, OSError, ValueError) as e:
        raise WeightUpdateError(f"cannot load {model_path}: {e}") from e
    running, loaded = model_tensors(model), model_tensors(fresh)
    for name, tensor in loaded.items():
        target = running.get(name)
        if target is None:
            raise WeightUpdateError(f"{model_path}: {name} has no counterpart in the running model")
        if target.shape != tensor.shape or target.dtype != tensor.dtype:
            raise WeightUpdateError(
                f"{model_path}: {name} is {tensor.dtype} {tuple(tensor.shape)}, "
                f"the running model's {target.dtype} {tuple(target.shape)}"
            )
    # A kernel layout the new model lacks would keep the old weights' values.
    stale = [name for name in running.keys() - loaded.keys() if name.endswith("]")]
    if stale:
        raise WeightUpdateError(f"the running model's kernel layouts {stale[:3]} would not be rebuilt")
    with torch.inference_mode():
        for name, tensor in loaded.items():
            running[name].copy_(tensor)
    # The second model sits in reference cycles (modules and their hooks): free it now, not at
    # some later collection, or every update holds another copy of the weights for a while.
    del fresh, loaded
    gc.collect()


def _locate(model: nn.Module, name: str) -> tuple[str, torch.Tensor | QuantizedWeight, tuple[slice | int, ...]]:
    """Where checkpoint tensor `name` (a Hugging Face name) lives in `model`: its name after the
    model's renames, the weight holding it, and its index in that weight (a fused parameter's
    piece). A tied lm_head is the embedding. Raises KeyError."""
    for old, new in getattr(model, "checkpoint_renames", {}).items():
        name = name.replace(old, new)
    if name == "lm_head.weight" and getattr(model, "tie_word_embeddings", False):
        name = "model.embed_tokens.weight"
    param_name, index = checkpoint_map(model).get(name, (name, ()))
    path, _, attr = param_name.rpartition(".")
    try:
        weight = getattr(model.get_submodule(path), attr)
    except AttributeError:
        raise KeyError(name) from None
    if not isinstance(weight, (torch.Tensor, QuantizedWeight)):
        raise KeyError(name)
    return name, weight, index


def read_weight(model: nn.Module, name: str, truncate_size: int) -> list[Any]:
    """Checkpoint tensor `name` (a Hugging Face name, as upstream's `get_weights_by_name` takes
    it; a fused parameter's piece is cut from it) in float32 as nested lists, its first
    `truncate_size` rows. Under tensor parallelism: this rank's slice. Raises KeyError."""
    _, weight, index = _locate(model, name)
    value = weight.dequantize() if isinstance(weight, QuantizedWeight) else weight.detach()
    return (value[index] if index else value)[:truncate_size].float().cpu().tolist()


def write_weights(model: nn.Module, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
    """Checkpoint tensors (Hugging Face names; whole, or already this rank's slice) copied into
    the running model's dense parameters in place, as upstream's `update_weights_from_tensor`:
    every one is checked before any is written. Weights served quantized are refused (their
    records would need requantizing: update them from disk). Raises WeightUpdateError."""
    reads = getattr(model, "reads", None) or {}
    writes = []
    for raw_name, tensor in named_tensors:
        try:
            name, weight, index = _locate(model, raw_name)
        except KeyError:
            raise WeightUpdateError(f"the model has no parameter {raw_name!r}") from None
        if isinstance(weight, QuantizedWeight):
            raise WeightUpdateError(f"{raw_name} is served quantized ({weight.format.name}): update it from disk")
        target = weight.data[index] if index else weight.data
        if name in reads and tuple(tensor.shape) != tuple(target.shape):
            tensor = tensor[reads[name]]  # a whole tensor: this rank's slice of it
        if tuple(tensor.shape) != tuple(target.shape):
            raise WeightUpdateError(f"{raw_name} has shape {tuple(tensor.shape)}, expected {tuple(target.shape)}")
        writes.append((target, tensor))
    with torch.inference_mode():
        for target, tensor in writes:
            target.copy_(tensor)
