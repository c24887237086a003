"""The decoder-only transformer every supported architecture is an instance of.

Architectures differ in declared facts (`DecoderTraits`: q/k norm, Gemma's norms and embedding
scale; checkpoint renames) and in what the config says (QKV bias, sliding windows, soft-caps,
experts, latent attention's ranks); the computation is written once here and calls only
`sglang.ops` and the attention backend in the forward context. The forward reads no tensor
values into Python and has no data-dependent shapes, so it also runs under JAX's jit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import ClassVar

import torch
from torch import nn

from sglang import ops
from sglang.ops.attention import AttentionBackend
from sglang.ops.rotary import RotaryTable
from sglang.ops.step import ForwardContext
from sglang.runtime.layers.attention import SelfAttention
from sglang.runtime.layers.mla import LatentAttention
from sglang.runtime.layers.mlp import GatedMLP
from sglang.runtime.layers.module import Module
from sglang.runtime.layers.moe import SparseMoE
from sglang.runtime.layers.norm import RMSNorm
from sglang.runtime.layers.parallel import ParallelLMHead, VocabParallelEmbedding
from sglang.runtime.layers.sharding import Index
from sglang.runtime.lora.layers import LoraState
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.traits import DecoderTraits
from sglang.runtime.models.weights import checkpoint_reads, load_weights


class DecoderLayer(Module):
    def __init__(self, config: ModelConfig, layer_id: int, traits: DecoderTraits, dtype: torch.dtype) -> None:
        super().__init__()
        norm = functools.partial(RMSNorm, config.hidden_size, config.rms_norm_eps, dtype, traits.norm_unit_offset)
        self.input_layernorm = norm()
        self.self_attn: Module = (
            LatentAttention(config, layer_id, dtype) if config.mla else SelfAttention(config, layer_id, traits, dtype)
        )
        self.post_attention_layernorm = norm()
        """The MLP's input norm, fused with the residual add."""
        self.attention_output_norm = norm() if traits.sandwich_norms else None
        self.mlp_output_norm = norm() if traits.sandwich_norms else None
        self.local_rope = config.local_rope_theta is not None and config.sliding_window_for(layer_id) is not None
        if config.moe is not None and config.moe.is_moe_layer(layer_id):
            self.mlp: Module = SparseMoE(config, dtype)
        else:
            self.mlp = GatedMLP(config.hidden_size, config.intermediate_size, config.hidden_act, dtype)

    def forward(
        self,
        positions: torch.Tensor,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rotary: RotaryTables,
        ctx: ForwardContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Returns (this layer's output not yet added to the residual, the residual)."""
        if residual is None:
            residual, hidden = hidden, self.input_layernorm(hidden)
        else:
            hidden, residual = self.input_layernorm(hidden, residual)
        hidden = self.self_attn(positions, hidden, rotary.local if self.local_rope else rotary.global_, ctx)
        if self.attention_output_norm is not None:
            hidden = self.attention_output_norm(hidden)
        hidden, residual = self.post_attention_layernorm(hidden, residual)
        hidden = self.mlp(hidden)
        if self.mlp_output_norm is not None:
            hidden = self.mlp_output_norm(hidden)
        return hidden, residual


@dataclasses.dataclass(frozen=True)
class RotaryTables:
    """The rotary tables a step's layers index: `local` is the sliding layers' own (Gemma 3), the
    global table where the architecture has one only."""

    global_: torch.Tensor
    local: torch.Tensor


class DecoderModel(Module):
    def __init__(self, config: ModelConfig, traits: DecoderTraits, dtype: torch.dtype) -> None:
        super().__init__()
        self.embed_tokens = VocabParallelEmbedding(config.vocab_size, config.hidden_size, dtype)
        # Rounded to the model dtype first, as transformers does (sqrt(2304) is not a bf16 value).
        scale = torch.tensor(config.hidden_size**0.5, dtype=dtype).item()
        self.embed_scale = scale if traits.scaled_embedding else None
        self.layers = nn.ModuleList(DecoderLayer(config, i, traits, dtype) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, traits.norm_unit_offset)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, rotary: RotaryTables, ctx: ForwardContext
    ) -> torch.Tensor:
        hidden = self.embed_tokens(input_ids)
        if self.embed_scale is not None:
            hidden = hidden * self.embed_scale
        residual = None
        for layer in self.layers:
            hidden, residual = layer(positions, hidden, residual, rotary, ctx)
        hidden, _ = self.norm(hidden, residual)
        return hidden


class DecoderForCausalLM(Module):
    """`forward` returns final hidden states `[T, H]`; `compute_logits` maps the rows the caller
    selects (usually each sequence's last token) to float32 logits `[N, V]`."""

    traits: ClassVar[DecoderTraits] = DecoderTraits()
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
        self.model = DecoderModel(config, self.decoder_traits(config), dtype)
        tied = self.model.embed_tokens if config.tie_word_embeddings else None
        self.lm_head = ParallelLMHead(config.hidden_size, config.vocab_size, dtype, tied=tied)
        table = RotaryTable.build(config.rotary_dim, config.max_position, config.rope_theta, config.rope_scaling)
        self.register_buffer("cos_sin", table.cos_sin, persistent=False)
        local = None
        if config.local_rope_theta is not None:
            local = RotaryTable.build(config.rotary_dim, config.max_position, config.local_rope_theta).cos_sin
        self.register_buffer("local_cos_sin", local, persistent=False)
        self.reads = checkpoint_reads(self)
        self.lora: LoraState | None = None
        """Set by `runtime.lora` when the server serves adapters."""
        self.weights_version = 0
        """Bumped by `runtime.lora` each time it rewrites the model's tensors (`ops.step.StepModel`)."""

    @classmethod
    def decoder_traits(cls, config: ModelConfig) -> DecoderTraits:
        """The traits this model is built with: the declared ones, unless the config decides one."""
        return cls.traits

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext) -> torch.Tensor:
        if self.lora is not None:
            self.lora.token_slots = ctx.lora_slots  # what every LoRA layer of this step reads
        local = self.local_cos_sin if self.local_cos_sin is not None else self.cos_sin
        return self.model(input_ids, positions, RotaryTables(self.cos_sin, local), ctx)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        logits = self.lm_head(hidden).float()
        if (cap := self.config.final_logit_softcap) is not None:
            logits = cap * torch.tanh(logits / cap)
        return logits

    @property
    def attention_heads(self) -> tuple[int, int]:
        """(query heads, KV heads) this rank's attention computes (all of them without tensor parallelism)."""
        attention = self.model.layers[0].self_attn
        return attention.num_heads, attention.num_kv_heads

    def build_attention_backend(self, device: torch.device) -> AttentionBackend:
        """The bound attention backend for this model's attention kind and this rank's heads: the
        K/V backend here; a model whose layers attend otherwise builds its own kind's."""
        heads, kv_heads = self.attention_heads
        return ops.attention_backend(heads, kv_heads, self.config.head_dim, self.dtype, device)

    def checkpoint_read(self, name: str) -> Index | None:
        """The slice of checkpoint tensor `name` this rank holds, or None for all of it."""
        for old, new in self.checkpoint_renames.items():
            name = name.replace(old, new)
        return self.reads.get(name)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """`weights` may be whole checkpoint tensors or this rank's slices (`checkpoint_read`)."""
        load_weights(self, weights, renames=self.checkpoint_renames, reads=self.reads)
