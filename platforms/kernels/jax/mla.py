"""The jax family's multi-head latent attention: absorbed MLA on the ragged paged kernel.

With the weights absorbed, MLA is multi-query attention over `[c | k_pe]` rows whose values are
the latent `c` (`ops.mla`), so the jax.numpy ragged kernel serves it as one KV head of width
`R + r`: keys `[c | k_pe]`, values `[c | 0]`. The kernel's combined page layout stores keys and
values side by side, so this layout, `[num_pages, page_size, 2, R + r]`, holds the latent twice:
twice the bytes per token of a latent-only layout, declared as such (the pool is sized from it).
A latent-only jax kernel (and Pallas' MLA on a TPU) would halve it; none is written yet.
The step contract (`plan`, `metadata`) is the ragged attention's, so the tpu platform's jitted
steps run it unchanged.
"""

from __future__ import annotations

import torch

from sglang.ops.attention import AttentionLayer
from sglang.ops.mla import MLABackend
from sglang.platforms.kernels.jax.attention import RaggedMetadata, RaggedPagedAttention


class RaggedAbsorbedMLA(MLABackend):
    kernel = staticmethod(RaggedPagedAttention.kernel)
    plan = RaggedPagedAttention.plan
    metadata = staticmethod(RaggedPagedAttention.metadata)

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        if num_slots % self.page_size:
            raise ValueError(f"{num_slots} slots are not whole pages of {self.page_size}")
        return (num_slots // self.page_size, self.page_size, 2, self.kv_lora_rank + self.qk_rope_head_dim)

    def kv_bytes_per_token(self) -> int:
        width = self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * width * self.kv_dtype.itemsize

    def forward(
        self, q_nope, q_pe, latent, k_pe, w_kc, w_vc, kv_buffer, metadata: RaggedMetadata, layer: AttentionLayer
    ):  # type: ignore[override]
        rank = self.kv_lora_rank
        query = torch.cat([torch.einsum("thd,hdr->thr", q_nope, w_kc.to(q_nope.dtype)), q_pe], dim=-1)
        keys = torch.cat([latent, k_pe], dim=-1).unsqueeze(1)
        values = torch.cat([latent, torch.zeros_like(k_pe)], dim=-1).unsqueeze(1)
        attended, kv_buffer = self.kernel(
            query,
            keys,
            values,
            kv_buffer,
            metadata.kv_lens,
            metadata.page_indices,
            metadata.cu_q_lens,
            metadata.distribution,
            sm_scale=layer.scale,
            max_q_len=metadata.max_q_len,
        )
        return torch.einsum("thr,hvr->thv", attended[..., :rank], w_vc.to(attended.dtype)), kv_buffer
