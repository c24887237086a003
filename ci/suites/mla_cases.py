"""Multi-head latent attention scenarios for op parity: the paged-attention scenarios (ragged
prefill, a cached prefix, decode, mixed; shuffled pages; a NaN-filled pool) over MLA's latent
KV layout, run in the same two steps as `paged_attention_cases`."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ops.attention import AttentionInputs, AttentionLayer

LAYERS: dict[str, tuple[int, int, int, int, int]] = {
    # name: (heads, kv_lora_rank, qk_rope_head_dim, qk_nope_head_dim, v_head_dim)
    "small": (4, 32, 8, 16, 16),
    "wide_v": (3, 16, 16, 8, 24),
    "deepseek": (8, 512, 64, 16, 16),
}
"""`deepseek` has DeepSeek V2/V3's latent and rotary widths, the only ones some vendor kernels
take (FlashInfer's and AITER's MLA), and 8 heads, the fewest AITER has an MLA decode kernel for:
it is not in `CASES` (every candidate would pay for 512-wide rows); the vendor stand-in tests run
it (`VENDOR_CASES`)."""

CASES: tuple[tuple[str, str, int], ...] = (
    *((s, "small", p) for s in ("prefill_ragged", "cached_prefix", "decode", "mixed") for p in pac.PAGE_SIZES),
    *((s, "wide_v", 16) for s in ("cached_prefix", "mixed")),
    ("long", "small", 16),
)
"""(scenario, layer, page size): every short scenario at page sizes 1 and 16, value and key head
dims that differ, and the long scenario once."""

VENDOR_CASES: tuple[tuple[str, str, int], ...] = (("mixed", "deepseek", 16), ("decode", "deepseek", 1))
"""The DeepSeek-shaped cases vendor adapters with fixed MLA widths run against their stand-ins:
prefill, cached prefixes and decode rows in one step, and a decode-only step (~1 s each on cpu)."""

Tokens = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]
"""(`q_nope` `[T, H, Dn]`, `q_pe` `[T, H, r]`, `latent` `[T, R]`, `k_pe` `[T, r]`)."""


@dataclass(frozen=True)
class MLAScenario:
    num_heads: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    layer: AttentionLayer
    num_slots: int
    prefix: AttentionInputs
    step: AttentionInputs
    prefix_tokens: Tokens
    step_tokens: Tokens
    w_kc: torch.Tensor
    w_vc: torch.Tensor


def _tokens(n: int, heads: int, rank: int, rope: int, nope: int, dtype: torch.dtype, gen: torch.Generator) -> Tokens:
    shapes = ((n, heads, nope), (n, heads, rope), (n, rank), (n, rope))
    return tuple(torch.randn(*shape, generator=gen).to(dtype) for shape in shapes)  # type: ignore[return-value]


def build(scenario: str, layer: str, page_size: int, dtype: torch.dtype, gen: torch.Generator) -> MLAScenario:
    seq_lens, extend_lens = pac.SCENARIOS[scenario]
    heads, rank, rope, nope, v_dim = LAYERS[layer]
    slots, num_slots = pac.page_slots(seq_lens, page_size, gen)
    cached = [(s[:p], p) for s, p in zip(slots, (s - e for s, e in zip(seq_lens, extend_lens))) if p]
    prefix_lens = tuple(p for _, p in cached)
    prefix = AttentionInputs(prefix_lens, prefix_lens, torch.cat([s for s, _ in cached]) if cached else slots[0][:0])
    return MLAScenario(
        num_heads=heads,
        kv_lora_rank=rank,
        qk_rope_head_dim=rope,
        layer=AttentionLayer(layer_id=0, scale=(nope + rope) ** -0.5),
        num_slots=num_slots,
        prefix=prefix,
        step=AttentionInputs(seq_lens, extend_lens, torch.cat(slots)),
        prefix_tokens=_tokens(sum(prefix_lens), heads, rank, rope, nope, dtype, gen),
        step_tokens=_tokens(sum(extend_lens), heads, rank, rope, nope, dtype, gen),
        w_kc=(torch.randn(heads, nope, rank, generator=gen) * rank**-0.5).to(dtype),
        w_vc=(torch.randn(heads, v_dim, rank, generator=gen) * rank**-0.5).to(dtype),
    )


def run(backend_cls: type, scenario: MLAScenario) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(step-1 output, step-2 output, the latent buffer after step 2), the buffer NaN at first."""
    q_nope = scenario.step_tokens[0]
    backend = backend_cls(
        scenario.num_heads, scenario.kv_lora_rank, scenario.qk_rope_head_dim, q_nope.dtype, q_nope.device
    )
    kv_buffer = torch.full(
        backend.kv_buffer_shape(scenario.num_slots), float("nan"), dtype=q_nope.dtype, device=q_nope.device
    )
    outputs = []
    for inputs, tokens in ((scenario.prefix, scenario.prefix_tokens), (scenario.step, scenario.step_tokens)):
        if not tokens[0].shape[0]:
            outputs.append(tokens[0].new_empty(0, scenario.num_heads, scenario.w_vc.shape[1]))
            continue
        out, kv_buffer = backend.forward(
            *tokens, scenario.w_kc, scenario.w_vc, kv_buffer, backend.plan(inputs), scenario.layer
        )
        outputs.append(out)
    return outputs[0], outputs[1], kv_buffer
