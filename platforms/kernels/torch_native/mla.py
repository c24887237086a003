"""Multi-head latent attention with the weights absorbed, over torch's SDPA.

Each head's query is moved onto the latent (`q_nope[h] @ w_kc[h]`, `[T, H, R]`) and joined with
its rotary part, so attention runs as multi-query attention over the cached `[c | k_pe]` rows
themselves (one KV head of width `R + r`, values the first `R` columns); `w_vc` maps the
attended latent to each head's value space afterwards. Nothing per head is decompressed from the
cache, for extend and decode alike. Decode rows are batched into one SDPA call over padded slot
tables (`SdpaAttention.plan`'s metadata); extend rows run one call per sequence.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.attention import AttentionInputs, visible_mask
from sglang.ops.mla import MLABackend, store_latent
from sglang.platforms.kernels.torch_native.attention import SdpaAttention, SdpaAttentionMetadata


class AbsorbedMLA(MLABackend):
    decode_rows_see_each_other = True  # `forward` stores every new latent row before any attention

    def plan(self, inputs: AttentionInputs) -> SdpaAttentionMetadata:
        return SdpaAttention.plan(self, inputs)  # type: ignore[arg-type]  # reads only inputs and device

    def forward(self, q_nope, q_pe, latent, k_pe, w_kc, w_vc, kv_buffer, metadata, layer):
        kv_buffer = store_latent(kv_buffer, metadata.new_slots, latent, k_pe)
        rank = self.kv_lora_rank
        query = torch.cat([torch.einsum("thd,hdr->thr", q_nope, w_kc.to(q_nope.dtype)), q_pe], dim=-1)
        attended = query.new_empty(*query.shape[:2], rank)
        if metadata.decode_rows is not None:
            attended[metadata.decode_q_index] = self._decode(query[metadata.decode_q_index], kv_buffer, metadata, layer)
        inputs = metadata.inputs
        q_starts, kv_starts = inputs.q_starts, inputs.kv_starts
        for i in metadata.extend_rows:
            seq_len, prefix_len = inputs.seq_lens[i], inputs.prefix_lens[i]
            rows = kv_buffer[inputs.kv_slots[kv_starts[i] : kv_starts[i + 1]]][None, None]  # [1, 1, S, R + r]
            mask = None
            if prefix_len:
                mask = visible_mask(torch.arange(prefix_len, seq_len, device=query.device), seq_len, None)
            out = F.scaled_dot_product_attention(
                query[None, q_starts[i] : q_starts[i + 1]].transpose(1, 2),  # 4-D: CPU SDPA flash-attends only those
                rows,
                rows[..., :rank],
                attn_mask=mask,
                is_causal=mask is None,
                scale=layer.scale,
                enable_gqa=True,
            )
            attended[q_starts[i] : q_starts[i + 1]] = out[0].transpose(0, 1)
        return torch.einsum("thr,hvr->thv", attended, w_vc.to(attended.dtype)), kv_buffer

    def _decode(self, query: torch.Tensor, kv_buffer: torch.Tensor, metadata, layer) -> torch.Tensor:
        """The decode rows' latent queries `[Bd, H, R + r]` -> their attended latents `[Bd, H, R]`."""
        rows = kv_buffer[metadata.decode_slots].unsqueeze(1)  # [Bd, 1, L, R + r]
        decoded = F.scaled_dot_product_attention(
            query.unsqueeze(2),
            rows,
            rows[..., : self.kv_lora_rank],
            attn_mask=metadata.decode_valid,
            scale=layer.scale,
            enable_gqa=True,
        )
        return decoded.squeeze(2)
