"""Paged-attention scenarios: ragged batches over a shuffled page table, run in two steps.

Step 1 prefills every sequence's cached prefix; step 2 is the step under test (prefill with a
cached prefix, decode, or a mix). Pages are drawn from a shuffled pool larger than needed, so a
sequence's slots are not contiguous, and the KV buffer starts as NaN: a slot no sequence owns
stays NaN, so a backend that reads a slot it should not (or an unmasked padding position) puts
NaN into its output. `build` draws on the oracle device; `run` runs wherever the scenario's
tensors are.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer

SCENARIOS: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    # name: (seq_lens after the step, tokens new in the step)
    "prefill_ragged": ((5, 1, 9, 3), (5, 1, 9, 3)),
    "cached_prefix": ((7, 12, 4), (3, 5, 4)),
    "decode": ((4, 9, 17, 2), (1, 1, 1, 1)),
    "mixed": ((6, 11, 3, 20, 8), (6, 1, 2, 1, 3)),
    # Longer than one 32/64-position kernel block: several query blocks in step 1, prefix blocks
    # crossed in step 2, a decode over more than one split, and a first-token decode.
    "long": ((40, 70, 1), (8, 1, 1)),
}

LAYERS: dict[str, tuple[int, int, int, int | None, float | None]] = {
    # name: (query heads, kv heads, head dim, sliding window, logit softcap)
    "mha": (2, 2, 16, None, None),
    "gqa": (6, 2, 32, None, None),
    "gqa_window": (4, 2, 16, 4, None),
    "softcap": (4, 1, 16, None, 1.0),
    "gqa8_window": (8, 1, 32, 6, None),
    # The smallest head dim the vendor attention kernels take (flashinfer, aiter, IPEX: 64+).
    "gqa_d64": (8, 2, 64, None, None),
    # Real models' shapes: head dim 128 with GQA group 7 (Qwen2.5-7B: 28/4, one KV head per
    # rank at --tp-size 4), head dim 256 with group 5. Few tokens keep the interpreter quick.
    "gqa7_d128": (7, 1, 128, None, None),
    "gqa5_d256": (5, 1, 256, None, None),
    # Head dims that are not powers of two: 96 (Phi-3-mini), 80 (Phi-2, StableLM-2).
    "gqa4_d96": (4, 1, 96, None, None),
    "gqa2_d80": (4, 2, 80, None, None),
    "gqa_window_sinks": (4, 2, 16, 4, None),
}
SINK_LAYERS = frozenset({"gqa_window_sinks"})
"""Layers with attention sinks (gpt-oss): a learned logit per query head, drawn `N(0, 1)`."""

PAGE_SIZES = (1, 16)
VENDOR_PAGE_SIZES = (16, 32, 64)
"""Page sizes the vendor families' paged kernels are run with in real deployments."""

CASES: tuple[tuple[str, str, int], ...] = (
    *(
        (s, layer, p)
        for s in ("prefill_ragged", "cached_prefix", "decode", "mixed")
        for layer in ("mha", "gqa", "gqa_window", "softcap")
        for p in PAGE_SIZES
    ),
    *(("long", layer, p) for layer in ("gqa", "gqa8_window") for p in PAGE_SIZES),
    *((s, "gqa8_window", p) for s in ("decode", "mixed") for p in PAGE_SIZES),
    *((s, "gqa_d64", 16) for s in ("cached_prefix", "decode", "mixed")),
    ("decode", "gqa_d64", 1),
    *(
        (s, layer, p)
        for (s, layer), p in zip(
            (("decode", "gqa7_d128"), ("mixed", "gqa7_d128"), ("cached_prefix", "gqa5_d256")), VENDOR_PAGE_SIZES
        )
    ),
    ("decode", "gqa4_d96", 16),
    ("mixed", "gqa2_d80", 32),
    *((s, "gqa_window_sinks", p) for s in ("cached_prefix", "mixed") for p in PAGE_SIZES),
    ("decode", "gqa_window_sinks", 16),
)
"""(scenario, layer, page size) the parity suites run: the full product of the short scenarios
and the first four layers, and the long scenario, GQA ratio 8 and head dim 64 where they add
coverage (the Triton interpreter is slow, and every case runs for every candidate; head dim 64 is
what makes the vendor kernels, which take no smaller heads, eligible at all); and the real shapes
(head dims 128 and 256, GQA groups 7 and 5) at the vendor page sizes, and head dims 96 and 80,
one scenario each."""
SPARE_PAGES = 3
"""Pages no sequence owns: garbage a wrong read would hit."""


@dataclass(frozen=True)
class AttentionScenario:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    layer: AttentionLayer
    page_size: int
    num_slots: int
    prefix: AttentionInputs
    step: AttentionInputs
    prefix_qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    step_qkv: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    sinks: torch.Tensor | None = None
    """`[Hq]` sink logits for a layer with sinks."""


def page_slots(seq_lens: tuple[int, ...], page_size: int, gen: torch.Generator) -> tuple[list[torch.Tensor], int]:
    """Per sequence, the slot of each token (page-wise from a shuffled pool); and the pool size."""
    pages_needed = [-(-s // page_size) for s in seq_lens]
    num_pages = sum(pages_needed) + SPARE_PAGES
    pool = torch.randperm(num_pages, generator=gen)
    slots, cursor = [], 0
    for seq_len, count in zip(seq_lens, pages_needed):
        pages = pool[cursor : cursor + count]
        cursor += count
        slots.append((pages[:, None] * page_size + torch.arange(page_size)).flatten()[:seq_len])
    return slots, num_pages * page_size


def _qkv(tokens: int, heads: int, kv_heads: int, dim: int, dtype: torch.dtype, gen: torch.Generator):
    return (
        torch.randn(tokens, heads, dim, generator=gen).to(dtype),
        torch.randn(tokens, kv_heads, dim, generator=gen).to(dtype),
        torch.randn(tokens, kv_heads, dim, generator=gen).to(dtype),
    )


def build(scenario: str, layer: str, page_size: int, dtype: torch.dtype, gen: torch.Generator) -> AttentionScenario:
    seq_lens, extend_lens = SCENARIOS[scenario]
    heads, kv_heads, dim, window, softcap = LAYERS[layer]
    slots, num_slots = page_slots(seq_lens, page_size, gen)
    # Step 1 holds only the sequences that have a cached prefix, as a runtime's prefill would.
    cached = [(s[:p], p) for s, p in zip(slots, (s - e for s, e in zip(seq_lens, extend_lens))) if p]
    prefix_lens = tuple(p for _, p in cached)
    prefix = AttentionInputs(
        seq_lens=prefix_lens,
        extend_lens=prefix_lens,
        kv_slots=torch.cat([s for s, _ in cached]) if cached else slots[0][:0],
    )
    step = AttentionInputs(seq_lens=seq_lens, extend_lens=extend_lens, kv_slots=torch.cat(slots))
    return AttentionScenario(
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=dim,
        layer=AttentionLayer(
            layer_id=0, scale=dim**-0.5, sliding_window=window, logit_softcap=softcap, sinks=layer in SINK_LAYERS
        ),
        page_size=page_size,
        num_slots=num_slots,
        prefix=prefix,
        step=step,
        prefix_qkv=_qkv(sum(prefix_lens), heads, kv_heads, dim, dtype, gen),
        step_qkv=_qkv(sum(extend_lens), heads, kv_heads, dim, dtype, gen),
        sinks=torch.randn(heads, generator=gen).to(dtype) if layer in SINK_LAYERS else None,
    )


def run(backend_cls: type, scenario: AttentionScenario) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Runs both steps with a fresh backend on the scenario's device: (step-1 output, step-2
    output, the KV buffer after step 2). The buffer starts as NaN in the layout the backend asks for."""
    q, _, _ = scenario.step_qkv
    backend = backend_cls(scenario.num_heads, scenario.num_kv_heads, scenario.head_dim, q.dtype, q.device)
    kv_buffer = torch.full(backend.kv_buffer_shape(scenario.num_slots), float("nan"), dtype=q.dtype, device=q.device)
    outputs = []
    sinks = {} if scenario.sinks is None else {"sinks": scenario.sinks}
    for inputs, (q, k, v) in ((scenario.prefix, scenario.prefix_qkv), (scenario.step, scenario.step_qkv)):
        if not q.shape[0]:
            outputs.append(q.clone())
            continue
        metadata = backend.plan(inputs)
        out, kv_buffer = backend.forward(q, k, v, kv_buffer, metadata, scenario.layer, **sinks)
        outputs.append(out)
    return outputs[0], outputs[1], kv_buffer
