"""A recording stand-in of FlashInfer's `BatchMLAPagedAttentionWrapper`, computing with our
reference. See `standin` for what a stand-in is and is not.

Each rule names where FlashInfer states it (flashinfer-ai/flashinfer, main of 2026-08):
- the constructor takes `(float_workspace_buffer, use_cuda_graph=False, qo_indptr=None,
  kv_indptr=None, kv_indices=None, kv_len_arr=None, backend="auto")`; "The recommended size is
  128MB" for the workspace; `backend="cutlass"` makes `run` take another layout (concatenated
  `q_nope_pe` / `ckv_kpe_cache` plus `kv_len` and `page_table`) (flashinfer/mla/_core.py,
  `BatchMLAPagedAttentionWrapper.__init__`);
- `plan(qo_indptr, kv_indptr, kv_indices, kv_len_arr, num_heads, head_dim_ckv, head_dim_kpe,
  page_size, causal, sm_scale, q_data_type, kv_data_type, use_profiler=False)`, every argument
  but the last required; `kv_indices` is "`[kv_indptr[-1]]` or larger"; `kv_len_arr` holds each
  request's KV length; `kv_data_type` is fp16, bf16 or (SM90 only) fp8 (`plan`);
- the prebuilt modules index in int32 with `head_dim_ckv` 512, `head_dim_kpe` 64 and
  `dtype_q == dtype_kv` (flashinfer/aot.py, the MLA section); `kv_indices` must be int32
  (`CHECK_INPUT_TYPE(kv_indices, dl_int32)`, csrc/batch_mla_run.cu);
- `run(q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False, ...)`:
  `q_nope` `[T, num_heads, head_dim_ckv]`, `q_pe` `[T, num_heads, head_dim_kpe]`, `ckv_cache`
  `[num_pages, page_size, head_dim_ckv]`, `kpe_cache` `[num_pages, page_size, head_dim_kpe]`,
  dtypes as planned ("does not match the planned q_data_type", `run`); only the page and token
  strides of the caches are passed to the kernel (csrc/batch_mla_run.cu), so the feature stride
  must be 1; the output is `[T, num_heads, head_dim_ckv]` (`torch.empty_like(q_nope)`).
"""

from __future__ import annotations

from itertools import pairwise

import torch

from .standin import Recorder, expect, expect_tensor, latent_attention, token_slots

WORKSPACE_BYTES = 128 * 1024 * 1024
HEAD_DIM_CKV, HEAD_DIM_KPE = 512, 64
"""flashinfer/aot.py: the MLA shape FlashInfer's wheel prebuilds (DeepSeek V2/V3)."""
MLA_KV_DTYPES = (torch.float16, torch.bfloat16)
"""`plan`'s `_SUPPORTED_MLA_KV_DTYPES` less fp8, which it takes on SM90 only."""


class BatchMLAPagedAttentionWrapper:
    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph=False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend="auto",
        *,
        recorder: Recorder,
    ) -> None:
        expect_tensor(float_workspace_buffer, "float_workspace_buffer", ndim=1)
        expect(float_workspace_buffer.nbytes == WORKSPACE_BYTES, "the workspace should be 128 MB")
        expect(backend in ("auto", "fa2", "fa3"), f"backend {backend!r}: cutlass's run takes another layout")
        expect(not use_cuda_graph, "CUDA-graph mode needs the four index buffers; the adapter does not capture")
        self.recorder = recorder
        self.device = float_workspace_buffer.device
        self.planned: dict | None = None
        recorder.record("mla.__init__", backend=backend)

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        head_dim_ckv,
        head_dim_kpe,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
        use_profiler=False,
    ) -> None:
        for value, what in ((qo_indptr, "qo_indptr"), (kv_indptr, "kv_indptr"), (kv_indices, "kv_indices")):
            expect_tensor(value, what, dtype=torch.int32, ndim=1)
        expect_tensor(kv_len_arr, "kv_len_arr", dtype=torch.int32, ndim=1)
        expect((head_dim_ckv, head_dim_kpe) == (HEAD_DIM_CKV, HEAD_DIM_KPE), "head_dim_ckv 512, head_dim_kpe 64")
        expect(isinstance(num_heads, int) and num_heads > 0, "num_heads must be a positive int")
        expect(isinstance(page_size, int) and page_size > 0, "page_size must be a positive int")
        expect(isinstance(causal, bool), "causal is a bool")
        expect(isinstance(sm_scale, float), "sm_scale is a float")
        expect(kv_data_type in MLA_KV_DTYPES, f"MLA kv_data_type {kv_data_type} is not supported")
        expect(q_data_type == kv_data_type, "the prebuilt modules take dtype_q == dtype_kv")
        qo, kv, lens = qo_indptr.tolist(), kv_indptr.tolist(), kv_len_arr.tolist()
        expect(len(qo) == len(kv) == len(lens) + 1, "qo_indptr and kv_indptr are [batch + 1], kv_len_arr [batch]")
        for what, ptr in (("qo_indptr", qo), ("kv_indptr", kv)):
            expect(ptr[0] == 0 and all(b >= a for a, b in pairwise(ptr)), f"{what} must rise from 0")
        expect(kv_indices.numel() >= kv[-1], "kv_indices is [kv_indptr[-1]] or larger")
        for i, kv_len in enumerate(lens):
            pages = kv[i + 1] - kv[i]
            expect((pages - 1) * page_size < kv_len <= pages * page_size, f"row {i}: kv_len {kv_len}, {pages} pages")
            expect(qo[i + 1] - qo[i] <= kv_len, f"row {i}: more queries than KV")
            expect(causal or qo[i + 1] - qo[i] == 1, "non-causal rows of several queries: not our op's mask")
        self.recorder.record("mla.plan", qo_indptr=qo, kv_len_arr=lens, page_size=page_size, causal=causal)
        self.planned = dict(
            qo=qo, kv=kv, lens=lens, indices=kv_indices, heads=num_heads, page_size=page_size, scale=sm_scale
        )
        self.dtype = q_data_type

    def run(self, q_nope, q_pe, ckv_cache, kpe_cache, out=None, lse=None, return_lse=False):
        expect(self.planned is not None, "run before plan")
        p = self.planned
        tokens, heads = p["qo"][-1], p["heads"]
        expect_tensor(q_nope, "q_nope", dtype=self.dtype, ndim=3)
        expect_tensor(q_pe, "q_pe", dtype=self.dtype, ndim=3)
        expect(tuple(q_nope.shape) == (tokens, heads, HEAD_DIM_CKV), "q_nope is [qo_indptr[-1], heads, ckv]")
        expect(tuple(q_pe.shape) == (tokens, heads, HEAD_DIM_KPE), "q_pe is [qo_indptr[-1], heads, kpe]")
        for cache, what, dim in ((ckv_cache, "ckv_cache", HEAD_DIM_CKV), (kpe_cache, "kpe_cache", HEAD_DIM_KPE)):
            expect_tensor(cache, what, dtype=self.dtype, ndim=3)
            expect(tuple(cache.shape[1:]) == (p["page_size"], dim), f"{what} is [pages, page_size, {dim}]")
            expect(cache.stride(2) == 1, f"{what}: the kernel takes a unit feature stride")
        expect(ckv_cache.shape[0] == kpe_cache.shape[0], "ckv_cache and kpe_cache hold the same pages")
        self.recorder.record("mla.run", tokens=tokens)
        rows = torch.cat([ckv_cache, kpe_cache], dim=-1).flatten(0, 1)
        qo, kv, lens = p["qo"], p["kv"], p["lens"]
        slots = [token_slots(p["indices"][kv[i] : kv[i + 1]], p["page_size"], n) for i, n in enumerate(lens)]
        extend = [b - a for a, b in pairwise(qo)]
        query = torch.cat([q_nope, q_pe], dim=-1)
        return latent_attention(query, rows, HEAD_DIM_CKV, lens, extend, slots, p["scale"])
