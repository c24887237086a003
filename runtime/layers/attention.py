"""Self-attention of a decoder layer: fused QKV projection, optional per-head q/k norm, rotary,
paged attention through the platform's backend (with per-head sink logits where the config has
them), output projection.

Under tensor parallelism a rank computes its share of the heads (`attention_heads`): QKV is
column-parallel, the output projection row-parallel (summed over ranks)."""

from __future__ import annotations

import functools

import torch

from sglang import ops
from sglang.ops.attention import AttentionLayer
from sglang.ops.step import ForwardContext
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.layers.linear import empty_parameter
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.norm import RMSNorm
from sglang.runtime.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.runtime.layers.sharding import Reads, attention_heads
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.traits import DecoderTraits


class SelfAttention(Module):
    def __init__(self, config: ModelConfig, layer_id: int, traits: DecoderTraits, dtype: torch.dtype) -> None:
        super().__init__()
        q_heads, kv_heads = attention_heads(config.num_heads, config.num_kv_heads, tp_group())
        self.num_heads = q_heads.size
        self.num_kv_heads = kv_heads.size
        self.head_dim = config.head_dim
        q_rows, kv_rows = q_heads.scaled(config.head_dim), kv_heads.scaled(config.head_dim)
        self.qkv_proj = ColumnParallelLinear(
            "qkv_proj",
            config.hidden_size,
            {"q_proj": q_rows, "k_proj": kv_rows, "v_proj": kv_rows},
            bias=config.attention_bias,
            dtype=dtype,
        )
        self.o_proj = RowParallelLinear(
            q_rows, config.hidden_size, dtype=dtype, bias=traits.output_bias and config.attention_bias
        )
        self.q_heads = q_heads
        self.sinks = empty_parameter(self.num_heads, dtype=dtype) if config.attention_sinks else None
        head_norm = functools.partial(RMSNorm, config.head_dim, config.rms_norm_eps, dtype, traits.norm_unit_offset)
        self.q_norm = head_norm() if traits.qk_norm else None
        self.k_norm = head_norm() if traits.qk_norm else None
        self.layer = AttentionLayer(
            layer_id=layer_id,
            scale=config.attention_scale,
            sliding_window=config.sliding_window_for(layer_id),
            logit_softcap=config.attn_logit_softcap,
            sinks=config.attention_sinks,
        )

    def checkpoint_reads(self, name: str) -> Reads:
        """This rank's heads' sink logits (its projections declare their own reads)."""
        if self.sinks is None or self.q_heads.whole:
            return {}
        return {f"{name}.sinks": self.q_heads.index(0)}

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, cos_sin: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        # Shapes from the heads alone, never from the token count: a traced step then replays
        # no size arithmetic (`unflatten`, unlike `view(-1, ...)`, also takes zero rows).
        q, k, v = self.qkv_proj.split(self.qkv_proj(hidden))
        q = q.unflatten(-1, (self.num_heads, self.head_dim))
        k = k.unflatten(-1, (self.num_kv_heads, self.head_dim))
        v = v.unflatten(-1, (self.num_kv_heads, self.head_dim))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = ops.apply_rotary(positions, q, k, cos_sin)
        layer_id = self.layer.layer_id
        sinks = {} if self.sinks is None else {"sinks": self.sinks}  # only backends that serve sinks take it
        metadata = ctx.metadata_for(windowed=self.layer.sliding_window is not None)
        out, ctx.kv_buffers[layer_id] = ctx.attn_backend.forward(
            q, k, v, ctx.kv_buffers[layer_id], metadata, self.layer, **sinks
        )
        return self.o_proj(out.flatten(-2))
