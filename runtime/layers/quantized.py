"""The weight-format side of layers: which `Linear` and embedding weights are `QuantizedWeight`s.

Layers are built and filled dense (the loader's float copy); `apply_weight_formats` then swaps a
layer's weight for a quantized one, from either
- `kept`: exact quantized checkpoint tensors (a GGUF's Q4_1/Q8_0 blocks), by checkpoint name. A
  fused projection is quantized only when every part it stacks is kept in one format (the parts'
  rows stacked in order); otherwise it stays dense;
- `target`: `--quantization`, which quantizes every decoder-layer linear that stayed dense (the
  embedding and lm_head keep what the checkpoint gives).
A tied lm_head keeps sharing the embedding's weight. Under tensor parallelism a kept weight is cut
to the rank's slice the layer declares (`checkpoint_reads`): rows for column-parallel layers and
the vocabulary, input columns on group boundaries for row-parallel ones; `target` quantizes the
rank's dense shard. The model's ops see the weight through
`ops.linear` / `ops.embedding`, whose candidates declare the formats they serve.
`prime_quantized_layers` then calls each quantized layer once, so that what a kernel builds on
first use (the cpu kernels' weight records) is built at load, not in the first request.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

import torch
from torch import nn

from sglang import ops
from sglang.ops.quant import DENSE, QuantizedWeight, WeightFormat, cat_rows, quantize
from sglang.runtime.layers.linear import Linear
from sglang.runtime.layers.parallel import VocabParallelEmbedding
from sglang.runtime.layers.sharding import ShardingError

logger = logging.getLogger(__name__)


def checkpoint_parts(path: str, module: nn.Module) -> list[str]:
    """The checkpoint tensors a module's weight is stacked from, in row order."""
    parent = path.rpartition(".")[0]
    prefix = f"{parent}." if parent else ""
    shards = getattr(module, "checkpoint_shards", None)
    if shards is None:
        return [f"{path}.weight"]
    pieces = [(index[0].start, name) for name, (param, index) in shards().items() if param.endswith(".weight")]
    return [prefix + name for _, name in sorted(pieces)]


def planned_formats(kept: Mapping[str, QuantizedWeight], target: WeightFormat | None) -> str:
    """What op selection is told the model's weights come in (comma-separated, sorted)."""
    names = {DENSE, *(w.format.name for w in kept.values())}
    if target is not None:
        names.add(target.name)
    return ",".join(sorted(names))


def rank_shard(weight: QuantizedWeight, index: tuple[slice, ...]) -> QuantizedWeight:
    """This rank's slice of a whole checkpoint weight: rows (`index` cuts dimension 0) or input
    columns (dimension 1, on group boundaries, else `ShardingError` with the reason)."""
    if len(index) == 1:
        return weight.rows(index[0])
    columns = index[1]
    try:
        return weight.columns(columns.start, columns.stop - columns.start)
    except ValueError as err:
        raise ShardingError(f"a quantized weight cannot be split over this tensor-parallel size: {err}") from err


def _swap(module: nn.Module, weight: QuantizedWeight) -> None:
    del module.weight  # the dense Parameter: the quantized weight replaces it
    module.weight = weight


def apply_weight_formats(
    model: nn.Module, kept: Mapping[str, QuantizedWeight], target: WeightFormat | None, dtype: torch.dtype
) -> dict[str, int]:
    """Swaps in quantized weights; returns how many layers took each format."""
    reads = getattr(model, "reads", None) or {}
    counts: dict[str, int] = {}
    embed = None
    for path, module in list(model.named_modules()):
        if isinstance(module, VocabParallelEmbedding):
            embed = module
        if not isinstance(module, (Linear, VocabParallelEmbedding)) or not isinstance(module.weight, nn.Parameter):
            continue
        names = checkpoint_parts(path, module)
        parts = [kept.get(name) for name in names]
        parts = [rank_shard(p, reads[n]) if p is not None and n in reads else p for p, n in zip(parts, names)]
        if all(p is not None for p in parts) and len({p.format for p in parts}) == 1:
            weight = cat_rows(parts)
        elif target is not None and isinstance(module, Linear) and ".layers." in f".{path}":
            weight = quantize(module.weight.data, target)
        else:
            continue
        weight = QuantizedWeight(weight.format, weight.qdata, weight.scales, weight.offsets, dtype)
        if tuple(weight.shape) != tuple(module.weight.shape):
            raise ValueError(f"{path}: quantized weight {weight.shape} does not match {tuple(module.weight.shape)}")
        _swap(module, weight)
        counts[weight.format.name] = counts.get(weight.format.name, 0) + 1
    lm_head = getattr(model, "lm_head", None)
    tied = getattr(model, "tie_word_embeddings", False) and embed is not None and lm_head is not None
    if tied and isinstance(embed.weight, QuantizedWeight) and isinstance(lm_head.weight, nn.Parameter):
        _swap(lm_head, embed.weight)
    if counts:
        logger.info("quantized weights: %s", ", ".join(f"{n} layers {f}" for f, n in sorted(counts.items())))
    return counts


def prime_quantized_layers(model: nn.Module) -> None:
    """Runs every quantized linear once on one zero row (on its device, in its dtype)."""
    primed: set[int] = set()
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if isinstance(module, Linear) and isinstance(weight, QuantizedWeight) and id(weight) not in primed:
            primed.add(id(weight))
            ops.linear(torch.zeros(1, weight.shape[1], dtype=weight.dtype, device=weight.qdata.device), weight)
