"""Paged attention through FlashInfer's batch wrappers, planned once per step.

The KV buffer keeps the default layout `[2, num_slots, Hk, D]`; `[num_slots // P, P, Hk, D]` views
of its halves are FlashInfer's NHD pages, so the pool, the KV store and KV copies are unchanged.
`plan` derives the CSR page view from the token-level slots (host `indptr`/`last_page_len`,
device `indices`, all int32). A step whose rows all decode one token runs the decode wrapper,
any other the prefill wrapper (causal, bottom-right aligned, which covers cached prefixes and
one-token rows). FlashInfer takes the scale, window and soft-cap at plan time, so each distinct
layer setting is planned once per step, on first use.

Decode runs on tensor cores where the GQA group needs it (`family.decode_on_tensor_cores`: the
CUDA-core kernels dispatch only some group sizes). The float workspace, shared by every wrapper,
starts zeroed, as the decode wrapper's constructor documents ("Must be initialized to 0 for its
first use"): its split-KV scratch is read before a kernel has written all of it.

Graph capture: each bucket gets a decode wrapper in FlashInfer's CUDA-graph mode over fixed
buffers (indptr, indices, last page lengths, new-token slots); `replay_metadata` re-plans it,
which rewrites those buffers in place.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import flashinfer
import torch

from sglang import ops
from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionLayer, AttentionMetadata, CaptureLimits
from sglang.platforms.kernels.flashinfer.family import decode_on_tensor_cores
from sglang.platforms.kernels.page_views import CsrPages, csr_pages

WORKSPACE_BYTES = 128 * 1024 * 1024
"""FlashInfer's float workspace (split-KV partial results), shared by every wrapper."""

LayerKey = tuple[float, int, float | None]
"""(scale, window_left, soft-cap): what FlashInfer fixes at plan time."""


def layer_key(layer: AttentionLayer) -> LayerKey:
    # FlashInfer's window_left counts keys left of the query; ours counts the query too.
    window_left = layer.sliding_window - 1 if layer.sliding_window is not None else -1
    return (layer.scale, window_left, layer.logit_softcap)


@dataclass
class FlashInferMetadata(AttentionMetadata):
    decode: bool = True
    """Every row decodes one token (the decode wrapper), else the prefill wrapper."""
    pages: CsrPages | None = field(default=None, repr=False)
    indices: torch.Tensor | None = field(default=None, repr=False)
    """`pages.indices` on the device."""
    qo_indptr: torch.Tensor | None = field(default=None, repr=False)
    """Host int32 `[rows + 1]` query offsets (prefill wrapper only)."""
    wrappers: dict[LayerKey, object] = field(default_factory=dict, repr=False)
    bucket: int | None = None
    """Set on captured metadata: the bucket whose static wrappers these are."""


class FlashInferAttention(AttentionBackend):
    def __init__(
        self, num_heads: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, dtype, device)
        self.workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.tensor_core_decode = decode_on_tensor_cores(num_heads // num_kv_heads)
        self._static: dict[str, torch.Tensor] = {}
        self._captured: dict[int, FlashInferMetadata] = {}

    def kv_buffer_shape(self, num_slots: int) -> tuple[int, ...]:
        """The default layout: its halves view as NHD pages without a copy."""
        return (2, num_slots, self.num_kv_heads, self.head_dim)

    def plan(self, inputs: AttentionInputs) -> FlashInferMetadata:
        rows = [i for i, e in enumerate(inputs.extend_lens) if e]
        pages = csr_pages(inputs, self.page_size, rows)
        decode = inputs.is_decode
        qo = torch.tensor([0, *(inputs.extend_lens[i] for i in rows)], dtype=torch.int64).cumsum(0)
        return FlashInferMetadata(
            inputs=inputs,
            new_slots=inputs.new_slots().to(self.device),
            decode=decode,
            pages=pages,
            indices=pages.indices.to(self.device),
            qo_indptr=None if decode else qo.to(torch.int32),
        )

    def _plan_wrapper(self, meta: FlashInferMetadata, key: LayerKey, wrapper: object) -> object:
        scale, window_left, softcap = key
        common = dict(
            window_left=window_left,
            logits_soft_cap=softcap,
            sm_scale=scale,
            q_data_type=self.dtype,
            kv_data_type=self.dtype,
        )
        pages = meta.pages
        shape = (self.num_heads, self.num_kv_heads, self.head_dim, self.page_size)
        if meta.decode:
            wrapper.plan(pages.indptr, meta.indices, pages.last_page_len, *shape, pos_encoding_mode="NONE", **common)
        else:
            wrapper.plan(meta.qo_indptr, pages.indptr, meta.indices, pages.last_page_len, *shape, causal=True, **common)
        return wrapper

    def _new_wrapper(self, decode: bool) -> object:
        if decode:
            return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
                self.workspace, "NHD", use_tensor_cores=self.tensor_core_decode
            )
        return flashinfer.BatchPrefillWithPagedKVCacheWrapper(self.workspace, "NHD")

    def forward(self, q, k, v, kv_buffer, metadata: FlashInferMetadata, layer: AttentionLayer):
        kv_buffer = ops.store_kv(kv_buffer, metadata.new_slots, k, v)
        key = layer_key(layer)
        wrapper = metadata.wrappers.get(key)
        if wrapper is None:
            wrapper = self._graph_wrapper(metadata.bucket) if metadata.bucket else self._new_wrapper(metadata.decode)
            metadata.wrappers[key] = self._plan_wrapper(metadata, key, wrapper)
        pages = kv_buffer.shape[1] // self.page_size
        paged = (
            kv_buffer[0].view(pages, self.page_size, self.num_kv_heads, self.head_dim),
            kv_buffer[1].view(pages, self.page_size, self.num_kv_heads, self.head_dim),
        )
        if not q.shape[0]:
            return torch.empty_like(q), kv_buffer
        # Rows with no new token were left out of the plan; they own no packed query rows.
        out = wrapper.run(q.contiguous(), paged)
        return out, kv_buffer

    # Graph capture ------------------------------------------------------------------------

    def init_capture(self, limits: CaptureLimits) -> str | None:
        max_pages = limits.max_kv_entries // self.page_size + limits.max_batch
        self._static = {
            "indptr": torch.zeros(limits.max_batch + 1, dtype=torch.int32, device=self.device),
            "indices": torch.zeros(max_pages, dtype=torch.int32, device=self.device),
            "last_page_len": torch.ones(limits.max_batch, dtype=torch.int32, device=self.device),
            "new_slots": torch.zeros(limits.max_batch, dtype=torch.int64, device=self.device),
        }
        return None

    def _graph_wrapper(self, batch: int) -> object:
        s = self._static
        return flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            self.workspace,
            "NHD",
            use_cuda_graph=True,
            use_tensor_cores=self.tensor_core_decode,
            paged_kv_indptr_buffer=s["indptr"][: batch + 1],
            paged_kv_indices_buffer=s["indices"],
            paged_kv_last_page_len_buffer=s["last_page_len"][:batch],
        )

    def capture_metadata(self, batch: int) -> FlashInferMetadata:
        padding = AttentionInputs(
            seq_lens=(1,) * batch, extend_lens=(1,) * batch, kv_slots=torch.zeros(batch, dtype=torch.int64)
        )
        meta = self.plan(padding)
        meta.new_slots = self._static["new_slots"][:batch]
        meta.bucket = batch
        self._captured[batch] = meta
        return meta

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        meta = self._captured[batch]
        fresh = self.plan(inputs)
        meta.new_slots.copy_(fresh.new_slots)
        meta.inputs, meta.pages, meta.indices = inputs, fresh.pages, fresh.indices
        for key, wrapper in meta.wrappers.items():
            self._plan_wrapper(meta, key, wrapper)
