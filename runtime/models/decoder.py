"""The decoder-only transformer every supported architecture is an instance of.

Architectures differ in declared facts (q/k norm, checkpoint renames) and in what the config
says (QKV bias, sliding window, experts); the computation is written once here and calls only
`sglang.ops` and the attention backend in the forward context. The forward reads no tensor
values into Python and has no data-dependent shapes, so it also runs under JAX's jit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn

from sglang.ops.rotary import RotaryTable
from sglang.ops.step import ForwardContext
from sglang.runtime.layers.attention import SelfAttention
from sglang.runtime.layers.mlp import GatedMLP
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.moe import SparseMoE
from sglang.runtime.layers.norm import RMSNorm
from sglang.runtime.layers.parallel import ParallelLMHead, VocabParallelEmbedding
from sglang.runtime.layers.sharding import Index
from sglang.runtime.lora.layers import LoraState
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.weights import checkpoint_reads, load_weights


class DecoderLayer(Module):
    def __init__(self, config: ModelConfig, layer_id: int, qk_norm: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        self.self_attn = SelfAttention(config, layer_id, qk_norm, dtype)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)
        if config.moe is not None and config.moe.is_moe_layer(layer_id):
            self.mlp: Module = SparseMoE(config, dtype)
        else:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, dtype)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        cos_sin: torch.Tensor,
        ctx: ForwardContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, cos_sin, ctx)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        return self.mlp(hidden), residual


class DecoderModel(Module):
    def __init__(self, config: ModelConfig, qk_norm: bool, dtype: torch.dtype) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, dtype)
        self.layers = nn.ModuleList(DecoderLayer(config, i, qk_norm, dtype) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, cos_sin: torch.Tensor, ctx: ForwardContext
    ) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, cos_sin, ctx)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class DecoderForCausalLM(Module):
    """`forward` returns final hidden states `[T, H]`; `compute_logits` maps the rows the caller
    selects (usually each sequence's last token) to float32 logits `[N, V]`."""

    qk_norm: ClassVar[bool] = False
    checkpoint_renames: ClassVar[dict[str, str]] = {}
    default_qkv_bias: ClassVar[bool] = False
    """Whether q/k/v projections have biases when the config names neither `attention_bias` nor
    `qkv_bias` (transformers hard-codes them for Qwen2 and defaults them on for Qwen2-MoE)."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        super().__init__()
        if self.default_qkv_bias and all(config.raw.get(k) is None for k in ("attention_bias", "qkv_bias")):
            config = dataclasses.replace(config, attention_bias=True)
        self.config = config
        self.dtype = dtype
        self.tie_word_embeddings = config.tie_word_embeddings
        self.model = DecoderModel(config, self.qk_norm, dtype)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.hidden_size, config.vocab_size, dtype, tied=tied)
        table = RotaryTable.build(config.head_dim, config.max_position, config.rope_theta, config.rope_scaling)
        self.register_buffer("cos_sin", table.cos_sin, persistent=False)
        self.reads = checkpoint_reads(self)
        self.lora: LoraState | None = None
        """Set by `runtime.lora` when the server serves adapters."""

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        if self.lora is not None:
            self.lora.token_slots = ctx.lora_slots  # what every LoRA layer of this step reads
        return self.model(input_ids, positions, self.cos_sin, ctx)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden).float()

    @property
    def attention_heads(self) -> tuple[int, int]:
        """(query heads, KV heads) this rank's attention computes (all of them without tensor parallelism)."""
        attention = self.model.layers[0].self_attn
        return attention.num_heads, attention.num_kv_heads

    def checkpoint_read(self, name: str) -> Index | None:
        """The slice of checkpoint tensor `name` this rank holds, or None for all of it."""
        for old, new in self.checkpoint_renames.items():
            name = name.replace(old, new)
        return self.reads.get(name)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """`weights` may be whole checkpoint tensors or this rank's slices (`checkpoint_read`)."""
        load_weights(self, weights, renames=self.checkpoint_renames, reads=self.reads)
