"""Multi-head latent attention of a decoder layer (DeepSeek V2/V3): queries (optionally through a
normalized low-rank bottleneck), the compressed KV latent and the shared rotary key, paged
attention through the platform's MLA backend (`ops.mla_backend`), output projection.

Only the latent and the rotary key reach the backend (and its cache); the per-head key and
value up-projections are handed over as `kv_b_proj`'s two halves, so a backend may absorb them.
Under tensor parallelism a rank computes its share of the heads, as upstream SGLang splits
them: the query projection (`q_proj`, or `q_b_proj` after the replicated bottleneck) and
`kv_b_proj` are column-parallel by head, the output projection row-parallel (summed over ranks);
the latent projection `kv_a_proj_with_mqa` and its norm are replicated, so every rank caches the
same latent rows (the cache is per token, not per head).
"""

from __future__ import annotations

import torch

from sglang import ops
from sglang.ops.attention import AttentionLayer
from sglang.ops.step import ForwardContext
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.layers.linear import Linear
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.norm import RMSNorm
from sglang.runtime.layers.parallel import ColumnParallelLinear, RowParallelLinear
from sglang.runtime.layers.sharding import even_split
from sglang.runtime.models.config import ModelConfig


class LatentAttention(Module):
    def __init__(self, config: ModelConfig, layer_id: int, dtype: torch.dtype) -> None:
        super().__init__()
        mla = config.mla
        assert mla is not None, "LatentAttention needs a config with MLA ranks"
        self.mla = mla
        heads = even_split(config.num_heads, tp_group(), "the number of attention heads")
        self.num_heads = heads.size
        self.num_kv_heads = 1
        """The cache holds one latent row per token, shared by every head."""
        hidden, bias = config.hidden_size, config.attention_bias

        def by_head(name: str, in_features: int, head_width: int) -> ColumnParallelLinear:
            return ColumnParallelLinear(name, in_features, {name: heads.scaled(head_width)}, False, dtype)

        if mla.q_lora_rank is None:
            self.q_proj: Linear | None = by_head("q_proj", hidden, mla.qk_head_dim)
        else:
            self.q_proj = None
            self.q_a_proj = Linear(hidden, mla.q_lora_rank, bias, dtype)
            self.q_a_layernorm = RMSNorm(mla.q_lora_rank, config.rms_norm_eps, dtype)
            self.q_b_proj = by_head("q_b_proj", mla.q_lora_rank, mla.qk_head_dim)
        self.kv_a_proj_with_mqa = Linear(hidden, mla.kv_lora_rank + mla.qk_rope_head_dim, bias, dtype)
        self.kv_a_layernorm = RMSNorm(mla.kv_lora_rank, config.rms_norm_eps, dtype)
        self.kv_b_proj = by_head("kv_b_proj", mla.kv_lora_rank, mla.qk_nope_head_dim + mla.v_head_dim)
        self.o_proj = RowParallelLinear(heads.scaled(mla.v_head_dim), hidden, dtype=dtype, bias=bias)
        scale = mla.qk_head_dim**-0.5 * config.rope_scaling.softmax_scale_factor
        self.layer = AttentionLayer(layer_id=layer_id, scale=scale)

    def forward(
        self, positions: torch.Tensor, hidden: torch.Tensor, cos_sin: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        mla = self.mla
        q = self.q_proj(hidden) if self.q_proj is not None else self.q_b_proj(self.q_a_layernorm(self.q_a_proj(hidden)))
        q_nope, q_pe = q.unflatten(-1, (self.num_heads, mla.qk_head_dim)).split(
            [mla.qk_nope_head_dim, mla.qk_rope_head_dim], dim=-1
        )
        latent, k_pe = self.kv_a_proj_with_mqa(hidden).split([mla.kv_lora_rank, mla.qk_rope_head_dim], dim=-1)
        latent = self.kv_a_layernorm(latent.contiguous())
        # Interleaved pairs (DeepSeek's layout) are the GPT-J rotation; the de-interleaved order
        # transformers writes V3's rotated dims in is a permutation shared by q and k, which
        # leaves every q.k product unchanged.
        q_pe, k_pe = ops.apply_rotary(positions, q_pe, k_pe.unsqueeze(1), cos_sin, is_neox=not mla.rope_interleaved)
        w_kc, w_vc = self.kv_b_proj.weight.view(self.num_heads, -1, mla.kv_lora_rank).split(
            [mla.qk_nope_head_dim, mla.v_head_dim], dim=1
        )
        layer_id = self.layer.layer_id
        out, ctx.kv_buffers[layer_id] = ctx.attn_backend.forward(
            q_nope, q_pe, latent, k_pe.squeeze(1), w_kc, w_vc, ctx.kv_buffers[layer_id], ctx.attn_metadata, self.layer
        )
        return self.o_proj(out.flatten(-2))
