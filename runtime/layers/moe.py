"""A sparse mixture-of-experts block: router (softmax top-k, DeepSeek-V2's group-limited softmax,
or DeepSeek-V3's grouped sigmoid routing), stacked experts (with biases and gpt-oss's clamped
SwiGLU where the config says so), an optional shared expert (gated as in Qwen2-MoE, or not).

Under tensor parallelism every rank holds every expert, each split over its intermediate size
(gate/up rows, down columns) as in a dense MLP; the router is replicated and the experts'
partial outputs are summed over ranks. Experts' biases (gpt-oss): the gate/up bias is split with
its rows (the clamped SwiGLU is elementwise); the down bias is replicated and added by the first
rank only, so the sum over ranks holds it once."""

from __future__ import annotations

import torch

from sglang import ops
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.layers.linear import Linear, Shards, empty_parameter
from sglang.runtime.layers.mlp import GatedMLP, gated_activation_op
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.sharding import Reads, even_split
from sglang.runtime.models.config import ModelConfig

# Checkpoints name an expert's projections either Llama-style or Mixtral-style (w1/w3/w2).
_GATE_NAMES = ("gate_proj", "w1")
_UP_NAMES = ("up_proj", "w3")
_DOWN_NAMES = ("down_proj", "w2")


class Experts(Module):
    """`gate_up_proj` `[E, 2I, H]` (`[gate | up]` per expert) and `down_proj` `[E, H, I]`: the
    stacked layout `ops.moe_experts` takes, and the one transformers v5 keeps in memory. `I` is
    this rank's share of the intermediate size. With `biased` (gpt-oss) `gate_up_bias` `[E, 2I]`
    and `down_bias` `[E, H]` as well, filled from per-expert `.bias` tensors."""

    def __init__(
        self, num_experts: int, hidden_size: int, intermediate_size: int, dtype: torch.dtype, biased: bool = False
    ) -> None:
        super().__init__()
        self.group = tp_group()
        self.split = even_split(intermediate_size, self.group, "the expert intermediate size")
        self.num_experts = num_experts
        self.intermediate_size = width = self.split.size
        self.gate_up_proj = empty_parameter(num_experts, 2 * width, hidden_size, dtype=dtype)
        self.down_proj = empty_parameter(num_experts, hidden_size, width, dtype=dtype)
        self.gate_up_bias = empty_parameter(num_experts, 2 * width, dtype=dtype) if biased else None
        self.down_bias = empty_parameter(num_experts, hidden_size, dtype=dtype) if biased else None

    def biases(self) -> dict[str, torch.Tensor]:
        """The keyword arguments `ops.moe_experts` takes for the biases (none without them, so
        candidates that serve no biases keep their signature)."""
        if self.gate_up_bias is None:
            return {}
        # The partial outputs are summed over ranks: the down bias goes into one of them.
        return {"w13_bias": self.gate_up_bias, "w2_bias": self.down_bias if self.group.rank == 0 else None}

    def checkpoint_shards(self) -> Shards:
        width = self.intermediate_size
        shards: Shards = {}
        for e in range(self.num_experts):
            for names, param, index in (
                (_GATE_NAMES, "gate_up_proj", (e, slice(0, width))),
                (_UP_NAMES, "gate_up_proj", (e, slice(width, 2 * width))),
                (_DOWN_NAMES, "down_proj", (e,)),
            ):
                for name in names:
                    shards[f"experts.{e}.{name}.weight"] = (f"experts.{param}", index)
            if self.gate_up_bias is not None:
                shards[f"experts.{e}.gate_proj.bias"] = ("experts.gate_up_bias", (e, slice(0, width)))
                shards[f"experts.{e}.up_proj.bias"] = ("experts.gate_up_bias", (e, slice(width, 2 * width)))
                shards[f"experts.{e}.down_proj.bias"] = ("experts.down_bias", (e,))
        return shards

    def checkpoint_reads(self, name: str) -> Reads:
        if self.split.whole:
            return {}
        reads: Reads = {}
        for e in range(self.num_experts):
            for names, dim in ((_GATE_NAMES, 0), (_UP_NAMES, 0), (_DOWN_NAMES, 1)):
                for proj in names:
                    reads[f"{name}.{e}.{proj}.weight"] = self.split.index(dim)
            if self.gate_up_bias is not None:
                for proj in ("gate_proj", "up_proj"):
                    reads[f"{name}.{e}.{proj}.bias"] = self.split.index(0)
        return reads


class GroupedRouter(Module):
    """DeepSeek-V3 / GLM-4-MoE's router: logits `weight @ x` and the per-expert selection bias
    (`e_score_correction_bias`, kept in float32 as checkpoints store it)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        moe = config.moe
        assert moe is not None and moe.grouped, "GroupedRouter needs a config with grouped routing"
        self.moe = moe
        self.weight = empty_parameter(moe.num_experts, config.hidden_size, dtype=dtype)
        self.e_score_correction_bias = empty_parameter(moe.num_experts, dtype=torch.float32)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        m = self.moe
        logits = ops.linear(x, self.weight)
        bias = self.e_score_correction_bias
        return ops.moe_route_grouped(
            logits, bias, m.top_k, m.num_groups, m.topk_groups, m.renormalize, m.routed_scaling
        )


class SparseMoE(Module):
    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        moe = config.moe
        assert moe is not None, "SparseMoE needs a config with experts"
        self.moe = moe
        self.activation = moe.activation or config.hidden_act
        gated_activation_op(self.activation)
        self.gate: Module = (
            GroupedRouter(config, dtype)
            if moe.grouped
            else Linear(config.hidden_size, moe.num_experts, moe.biased, dtype)
        )
        self.experts = Experts(moe.num_experts, config.hidden_size, moe.intermediate_size, dtype, moe.biased)
        self.shared_expert: GatedMLP | None = None
        self.shared_expert_gate: Linear | None = None
        if moe.shared_expert_intermediate_size:
            self.shared_expert = GatedMLP(
                config.hidden_size, moe.shared_expert_intermediate_size, config.hidden_act, dtype
            )
            if moe.shared_expert_gated:
                self.shared_expert_gate = Linear(config.hidden_size, 1, bias=False, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = self.moe
        if isinstance(self.gate, GroupedRouter):
            weights, expert_ids = self.gate(x)
        elif m.group_limited:
            weights, expert_ids = ops.moe_route_group_limited(
                self.gate(x), m.top_k, m.num_groups, m.topk_groups, m.renormalize, m.routed_scaling
            )
        else:
            weights, expert_ids = ops.moe_route(self.gate(x), m.top_k, "softmax", m.renormalize)
            if m.routed_scaling != 1.0:  # DeepSeek-V2's greedy routing scales; Mixtral and Qwen do not
                weights = weights * m.routed_scaling
        experts = self.experts
        out = ops.moe_experts(
            x, experts.gate_up_proj, experts.down_proj, weights, expert_ids, self.activation, **experts.biases()
        )
        out = experts.group.comm.all_reduce(out)
        if self.shared_expert_gate is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        elif self.shared_expert is not None:
            out = out + self.shared_expert(x)
        return out

    def prime(self) -> None:
        """Runs the bound expert kernel once on one zero token routed to expert 0. A kernel that
        keeps expert weights in a layout of its own (AITER shuffles them, in place) sets it up
        here, at load, so the memory it needs is in use before the KV pool is sized."""
        experts = self.experts
        weight = experts.gate_up_proj
        x = torch.zeros(1, weight.shape[-1], dtype=weight.dtype, device=weight.device)
        route = torch.ones(1, 1, dtype=torch.float32, device=weight.device)
        first = torch.zeros(1, 1, dtype=torch.int64, device=weight.device)
        ops.moe_experts(x, weight, experts.down_proj, route, first, self.activation, **experts.biases())


def prime_moe_layers(model: torch.nn.Module) -> None:
    """`SparseMoE.prime` on every MoE block of `model` (on its device, after the weights load)."""
    for module in model.modules():
        if isinstance(module, SparseMoE):
            module.prime()
