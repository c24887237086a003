"""LoRA slots inside the model: each targeted projection gets stacked A/B weights for every slot.

`attach_lora` replaces each targeted projection (`qkv_proj`, `o_proj`, `gate_up_proj`,
`down_proj`) with a `LoraLinear` that runs the base layer, then `ops.lora_shrink` and
`ops.lora_expand` over the rows' slots. Slot 0 is the base model's: zero weights and zero
scaling, so rows without an adapter get exactly the base output. The step hands the per-row
slots through `ForwardContext.lora_slots`; the model binds them to the shared `LoraState` at the
start of its forward.

Under tensor parallelism a LoRA is sharded as its base layer is. Column-parallel (q/k/v,
gate/up): the input is whole on every rank, so `A` is whole and each part's `B` keeps the output
rows of that part the rank holds. Row-parallel (o, down): the input is this rank's features, so
`A` keeps the matching input columns, `B` is whole, and the rank's partial LoRA output is added
to its partial base output before the layer's one all-reduce, which sums both (the LoRA is
linear in `h`, so the sum of the ranks' partial `B h` is `B` times the whole `h`).

Invariants: the stacked tensors are allocated once and only written in place (a captured step
reads the same tensors after a load); a slot's rows past its adapter's rank stay zero. Every
tensor a LoRA layer reads is a buffer of it (the shared scaling too, one tensor registered in
every layer), so a jitted step that substitutes the model's buffers takes them as arguments and
never bakes one in as a constant.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from sglang import ops
from sglang.runtime.layers.linear import Linear, MergedLinear
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.runtime.layers.sharding import Split, whole
from sglang.runtime.lora.adapter import LoraAdapter

_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}
_PLAIN = ("o_proj", "down_proj")


@dataclass
class LoraState:
    """What every LoRA layer of one model shares: per-slot scaling and the step's row slots."""

    scaling: torch.Tensor
    token_slots: torch.Tensor | None = None
    layers: dict[str, tuple[LoraLinear, int]] = field(default_factory=dict)
    """Checkpoint projection path (`model.layers.0.self_attn.q_proj`) to its layer and part."""


def rank_shards(base: Linear) -> tuple[Split, tuple[Split, ...]]:
    """The base layer's share on this rank: (its input features, each fused part's output rows),
    as slices of the checkpoint's whole tensors."""
    if isinstance(base, RowParallelLinear):
        return base.split, (whole(base.weight.shape[0]),)
    if isinstance(base, ColumnParallelLinear):
        return whole(base.weight.shape[1]), tuple(base.splits.values())
    widths = tuple(base.parts.values()) if isinstance(base, MergedLinear) else (base.weight.shape[0],)
    return whole(base.weight.shape[1]), tuple(whole(width) for width in widths)


class LoraLinear(Module):
    """`base(x)` plus each row's adapter. `a` `[S, N * R, in]`, `b` `[S, out, R]` (see `ops.lora`),
    `in` and `out` this rank's shares (`rank_shards`)."""

    def __init__(self, base: Linear, parts: tuple[str, ...], slots: int, rank: int, state: LoraState) -> None:
        super().__init__()
        self.base = base
        self.parts = parts
        self.in_split, self.out_splits = rank_shards(base)
        self.out_widths = tuple(split.size for split in self.out_splits)
        device = state.scaling.device
        dtype = base.weight.dtype
        a_shape = (slots, len(parts) * rank, self.in_split.size)
        self.register_buffer("a", torch.zeros(*a_shape, dtype=dtype, device=device))
        self.register_buffer("b", torch.zeros(slots, sum(self.out_widths), rank, dtype=dtype, device=device))
        self.register_buffer("scaling", state.scaling)
        self.rank = rank
        self.state = state

    def split(self, y: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return self.base.split(y)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        row_parallel = isinstance(self.base, RowParallelLinear)
        y = self.base.partial(x) if row_parallel else self.base(x)
        slots = self.state.token_slots
        if slots is not None:
            h = ops.lora_shrink(x, self.a, slots)
            y = ops.lora_expand(y, h, self.b, slots, self.scaling, self.out_widths)
        return self.base.reduce(y) if row_parallel else y

    def write(self, slot: int, part: int, a: torch.Tensor | None, b: torch.Tensor | None) -> None:
        """Sets `part` of `slot` to the whole checkpoint `(A [r, in], B [out_part, r])`, of which
        this rank keeps its shard, or to zeros with None."""
        rows = slice(part * self.rank, (part + 1) * self.rank)
        start = sum(self.out_widths[:part])
        cols = slice(start, start + self.out_widths[part])
        self.a[slot, rows].zero_()
        self.b[slot, cols].zero_()
        if a is not None and b is not None:
            r = a.shape[0]
            self.a[slot, rows][:r].copy_(a[self.in_split.index(1)])
            self.b[slot, cols, :r].copy_(b[self.out_splits[part].index(0)])


def attach_lora(model: nn.Module, slots: int, rank: int, targets: frozenset[str]) -> LoraState:
    """Wraps the targeted projections of every decoder layer; returns their shared state."""
    device = next(t for t in model.parameters()).device
    state = LoraState(scaling=torch.zeros(slots, dtype=torch.float32, device=device))
    for path, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in _FUSED:
                parts = _FUSED[child_name]
            elif child_name in _PLAIN:
                parts = (child_name,)
            else:
                continue
            if not isinstance(child, Linear) or not targets & set(parts):
                continue
            wrapped = LoraLinear(child, parts, slots, rank, state)
            setattr(module, child_name, wrapped)
            for index, part in enumerate(parts):
                state.layers[f"{path}.{part}"] = (wrapped, index)
    return state


def missing_modules(state: LoraState, adapter: LoraAdapter) -> list[str]:
    """The adapter's projections the model has no LoRA layer for."""
    return sorted(name for name in adapter.weights if name not in state.layers)


def write_slot(state: LoraState, slot: int, adapter: LoraAdapter | None) -> None:
    """Fills `slot` with `adapter` (every layer: the adapter's weights or zeros), or clears it."""
    for name, (layer, part) in state.layers.items():
        pair = adapter.weights.get(name) if adapter is not None else None
        a, b = pair if pair is not None else (None, None)
        layer.write(slot, part, a, b)
    state.scaling[slot] = adapter.scaling if adapter is not None else 0.0
