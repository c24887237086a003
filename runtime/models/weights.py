"""Filling a model's parameters from checkpoint tensors (Hugging Face names).

Every parameter must be filled exactly once, element for element: a missing tensor, a tensor
that does not fit its slot, or one loaded twice is an error naming the tensor. Fused parameters
(`qkv_proj`, `gate_up_proj`, stacked experts) are filled slice by slice, as their modules
declare through `checkpoint_shards()`.

Under tensor parallelism a module also declares `checkpoint_reads(name)`: the slice of each
checkpoint tensor its rank holds. A tensor may arrive already cut to that slice (the source read
only it) or whole (it is cut here); either way what is copied is this rank's slice.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import torch
from torch import nn

Target = tuple[str, tuple[slice | int, ...]]
Read = tuple[slice, ...]


class WeightLoadError(ValueError):
    pass


def checkpoint_map(model: nn.Module) -> dict[str, Target]:
    """Checkpoint name -> (parameter name, index) for every fused parameter's pieces."""
    mapping: dict[str, Target] = {}
    for path, module in model.named_modules():
        shards = getattr(module, "checkpoint_shards", None)
        if shards is None:
            continue
        parent = path.rpartition(".")[0]
        prefix = f"{parent}." if parent else ""
        for ckpt_name, (param_name, index) in shards().items():
            mapping[prefix + ckpt_name] = (prefix + param_name, index)
    return mapping


def checkpoint_reads(model: nn.Module) -> dict[str, Read]:
    """Checkpoint name -> the slice of it this rank holds, for every tensor not held whole."""
    reads: dict[str, Read] = {}
    for path, module in model.named_modules():
        declared = getattr(module, "checkpoint_reads", None)
        if declared is None or not path:
            continue
        parent, _, name = path.rpartition(".")
        prefix = f"{parent}." if parent else ""
        reads.update({prefix + ckpt_name: index for ckpt_name, index in declared(name).items()})
    return reads


def split_fused(
    weights: Iterable[tuple[str, torch.Tensor]], fused: Mapping[str, tuple[tuple[str, int], ...]]
) -> Iterator[tuple[str, torch.Tensor]]:
    """Checkpoint tensors stored fused (Phi-3's `qkv_proj`, `gate_up_proj`) as their parts.

    `fused` maps a module name to its parts' names and widths (rows, in order). Each part then
    loads like a separately stored one, so tensor parallelism cuts each by its own split (the
    rows a rank holds of a fused tensor are not contiguous).
    """
    for name, tensor in weights:
        module, _, kind = name.rpartition(".")
        parent, _, leaf = module.rpartition(".")
        parts = fused.get(leaf)
        if parts is None:
            yield name, tensor
            continue
        widths = [width for _, width in parts]
        if tensor.shape[0] != sum(widths):
            raise WeightLoadError(f"checkpoint tensor {name!r} has {tensor.shape[0]} rows, expected {sum(widths)}")
        for (part, _), piece in zip(parts, tensor.split(widths)):
            yield f"{parent}.{part}.{kind}", piece


def load_weights(
    model: nn.Module,
    weights: Iterable[tuple[str, torch.Tensor]],
    renames: Mapping[str, str] = {},
    ignored_suffixes: tuple[str, ...] = ("rotary_emb.inv_freq",),
    reads: Mapping[str, Read] = {},
) -> None:
    """Copies `weights` into `model`'s parameters, converting dtype; checks completeness.

    `renames` maps checkpoint name fragments to the model's (e.g. Mixtral's `block_sparse_moe.`
    to `mlp.`). A tied `lm_head.weight` in the checkpoint is skipped: the embedding fills it.
    """
    params = dict(model.named_parameters())
    shards = checkpoint_map(model)
    filled = dict.fromkeys(params, 0)
    tied = getattr(model, "tie_word_embeddings", False)
    for raw_name, tensor in weights:
        name = raw_name
        for old, new in renames.items():
            name = name.replace(old, new)
        if name.endswith(ignored_suffixes) or (tied and name == "lm_head.weight"):
            continue
        param_name, index = shards.get(name, (name, ()))
        if param_name not in params:
            raise WeightLoadError(f"checkpoint tensor {raw_name!r} matches no parameter of {type(model).__name__}")
        target = params[param_name].data[index] if index else params[param_name].data
        if name in reads and tuple(tensor.shape) != tuple(target.shape):
            tensor = tensor[reads[name]]  # a whole tensor: this rank's slice of it
        if tuple(target.shape) != tuple(tensor.shape):
            raise WeightLoadError(
                f"checkpoint tensor {raw_name!r} has shape {tuple(tensor.shape)}, "
                f"expected {tuple(target.shape)} for {param_name}"
            )
        target.copy_(tensor)
        filled[param_name] += tensor.numel()
    for name, param in params.items():
        if filled[name] != param.numel():
            state = "missing from the checkpoint" if filled[name] == 0 else "filled more than once or in part"
            raise WeightLoadError(f"parameter {name} is {state} ({filled[name]} of {param.numel()} values)")
