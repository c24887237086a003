"""Multi-head latent attention (DeepSeek V2/V3): the second attention kind, its KV layout and
the reference.

MLA caches, per token and layer, one row shared by every head: the normalized KV latent
`c` (`kv_lora_rank` values) followed by the rotated rotary key `k_pe` (`qk_rope_head_dim`
values). The buffer layout is `[num_slots, kv_lora_rank + qk_rope_head_dim]`, declared through
`kv_buffer_shape` exactly as the K/V backends declare theirs, so the pool is sized from it and
the radix cache, paging and KV transfer move its rows without knowing the kind.

Each head `h` decompresses the latent with the up-projections `w_kc[h]` `[Dn, R]` (keys) and
`w_vc[h]` `[Dv, R]` (values), which are the two parts of the checkpoint's `kv_b_proj`:

    score(q, s) = scale * (q_nope[h] . (w_kc[h] c_s) + q_pe[h] . k_pe_s)
    out[h]      = sum_s softmax(score)_s * (w_vc[h] c_s)

A backend may compute this decompressed (the reference: the definition) or absorbed
(`q_nope[h] w_kc[h]` is a query on the latent itself, and `w_vc[h]` applied after the
attention), which reads `R + r` values per cached token instead of `H * (Dn + Dv + r)`.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

import torch

from sglang.ops.attention import AttentionBackend, AttentionLayer, AttentionMetadata, visible_mask


def store_latent(
    kv_buffer: torch.Tensor, slots: torch.Tensor, latent: torch.Tensor, k_pe: torch.Tensor
) -> torch.Tensor:
    """Writes `[latent | k_pe]` (`[T, R]`, `[T, r]`) at `slots` `[T]`; hands back the buffer it wrote."""
    row = torch.cat([latent, k_pe], dim=-1).to(kv_buffer.dtype)
    return kv_buffer.index_copy_(0, slots, row)


class MLABackend(AttentionBackend):
    """One instance per model; `plan` once per step (the token-level contract of
    `AttentionInputs`, shared with the K/V backends), `forward` once per layer.

    Invariants: the KV buffer holds one `R + r` row per slot; `forward` writes the step's new
    rows before reading, so each new token attends to itself; slots outside `kv_slots` are never
    read (they may hold NaN).
    """

    fixed_widths: ClassVar[tuple[int, int] | None] = None
    """`(kv_lora_rank, qk_rope_head_dim)` where a backend's kernels are built for those alone
    (vendor kernels for DeepSeek's rows): the constructor refuses other widths."""

    def __init__(
        self, num_heads: int, kv_lora_rank: int, qk_rope_head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        if self.fixed_widths not in (None, (kv_lora_rank, qk_rope_head_dim)):
            rank, rope = self.fixed_widths
            raise ValueError(
                f"{type(self).__name__} takes kv_lora_rank {rank} and qk_rope_head_dim {rope}, "
                f"got {kv_lora_rank} and {qk_rope_head_dim}"
            )
        super().__init__(num_heads, 1, kv_lora_rank + qk_rope_head_dim, dtype, device)
        self.kv_lora_rank = kv_lora_rank
        self.qk_rope_head_dim = qk_rope_head_dim

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        return (num_slots, self.kv_lora_rank + self.qk_rope_head_dim)

    @abstractmethod
    def forward(  # type: ignore[override]  # MLA's inputs are latents, not per-head K/V
        self,
        q_nope: torch.Tensor,
        q_pe: torch.Tensor,
        latent: torch.Tensor,
        k_pe: torch.Tensor,
        w_kc: torch.Tensor,
        w_vc: torch.Tensor,
        kv_buffer: torch.Tensor,
        metadata: AttentionMetadata,
        layer: AttentionLayer,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """`q_nope` `[T, H, Dn]`, `q_pe` `[T, H, r]` (rotated), `latent` `[T, R]` (normalized),
        `k_pe` `[T, r]` (rotated), `w_kc` `[H, Dn, R]`, `w_vc` `[H, Dv, R]` -> (`[T, H, Dv]`,
        the KV buffer it wrote)."""


class ReferenceMLA(MLABackend):
    """Eager float32, one sequence at a time, keys and values decompressed: the oracle."""

    def forward(self, q_nope, q_pe, latent, k_pe, w_kc, w_vc, kv_buffer, metadata, layer):
        kv_buffer = store_latent(kv_buffer, metadata.new_slots, latent, k_pe)
        inputs = metadata.inputs
        rank = self.kv_lora_rank
        out = q_nope.new_empty(*q_nope.shape[:2], w_vc.shape[1])
        q_starts, kv_starts = inputs.q_starts, inputs.kv_starts
        for i, (seq_len, prefix_len) in enumerate(zip(inputs.seq_lens, inputs.prefix_lens)):
            if q_starts[i] == q_starts[i + 1]:
                continue
            cached = kv_buffer[inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]].float()
            c, cached_pe = cached[:, :rank], cached[:, rank:]
            keys = torch.einsum("sr,hdr->shd", c, w_kc.float())
            values = torch.einsum("sr,hdr->shd", c, w_vc.float())
            rows = slice(q_starts[i], q_starts[i + 1])
            scores = torch.einsum("qhd,shd->hqs", q_nope[rows].float(), keys)
            scores = (scores + torch.einsum("qhr,sr->hqs", q_pe[rows].float(), cached_pe)) * layer.scale
            mask = visible_mask(torch.arange(prefix_len, seq_len, device=scores.device), seq_len, None)
            probs = scores.masked_fill(~mask[None], float("-inf")).softmax(dim=-1)
            out[rows] = torch.einsum("hqs,shd->qhd", probs, values).to(out.dtype)
        return out, kv_buffer
