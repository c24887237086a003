"""A recording stand-in of `flashinfer` (0.7-era API): batch paged wrappers, the paged MLA wrapper
(`flashinfer_mla_standin`), norm, activation, rope and sampling, computing with our references.
See `standin` for what it is and is not.

Each rule a wrapper enforces names where FlashInfer states it (paths in flashinfer-ai/flashinfer,
read at release 0.6.17 and main of 2026-08):
- the float workspace "Must be initialized to 0 for its first use" (flashinfer/decode.py,
  `BatchDecodeWithPagedKVCacheWrapper.__init__`'s docstring; prefill.py's class example makes it
  with `torch.zeros`): checked the first time a buffer reaches a wrapper;
- CUDA-core decode plans only GQA groups 1, 2, 3, 4, 8 (`DISPATCH_GQA_GROUP_SIZE` in
  include/flashinfer/utils.cuh, reached from `BatchDecodeWithPagedKVCachePlan` in
  csrc/batch_decode.cu, raising "Unsupported group_size"); with `use_tensor_cores=True` decode
  plans the prefill kernels (flashinfer/decode.py `_plan_impl`), which take any group;
- `num_qo_heads` is a multiple of `num_kv_heads` (`CHECK_GQA_HEAD_DIVISIBLE`, csrc);
- `kv_layout` is NHD or HND (`_check_kv_layout`, flashinfer/utils.py); ours is NHD;
- CUDA-graph mode needs the three page-view buffers as tensors, the indptr one `batch + 1` long
  (flashinfer/decode.py `BatchDecodeWithPagedKVCacheWrapper.__init__`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglang.ops.norm import fused_add_rms_norm, rms_norm
from sglang.ops.rotary import apply_rotary
from sglang.ops.sampling import filter_probs

from .flashinfer_mla_standin import BatchMLAPagedAttentionWrapper
from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots

WORKSPACE_BYTES = 128 * 1024 * 1024
CUDA_CORE_DECODE_GROUPS = (1, 2, 3, 4, 8)
"""include/flashinfer/utils.cuh `DISPATCH_GQA_GROUP_SIZE` (to 0.6.17; main added 6 in 2026-08)."""


class _PagedWrapper:
    """What the decode and prefill wrappers share: workspace, layout, CUDA-graph buffers, run."""

    kind = ""

    def __init__(
        self, recorder: Recorder, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, **buffers
    ) -> None:
        expect_tensor(float_workspace_buffer, "workspace", dtype=torch.uint8, ndim=1)
        expect(float_workspace_buffer.numel() == WORKSPACE_BYTES, "the workspace must be 128 MB")
        if float_workspace_buffer.data_ptr() not in recorder.seen_workspaces:
            # decode.py BatchDecodeWithPagedKVCacheWrapper.__init__: "Must be initialized to 0 ...".
            expect(not bool(float_workspace_buffer.any()), "the float workspace must be zeroed before first use")
            recorder.seen_workspaces.add(float_workspace_buffer.data_ptr())
        expect(kv_layout == "NHD", f"kv_layout {kv_layout!r}: the adapter's pages are NHD")
        self.recorder = recorder
        self.device = float_workspace_buffer.device
        self.graph = use_cuda_graph
        self.buffers = buffers
        if use_cuda_graph:
            for name in ("paged_kv_indptr_buffer", "paged_kv_indices_buffer", "paged_kv_last_page_len_buffer"):
                expect_tensor(buffers.get(name), name, dtype=torch.int32)
        recorder.record(f"{self.kind}.__init__", use_cuda_graph=use_cuda_graph, buffers=buffers)
        self.planned: dict | None = None

    def _check_pages(self, indptr, indices, last_page_len, page_size) -> None:
        expect_tensor(indptr, "paged_kv_indptr", dtype=torch.int32, device_type="cpu", ndim=1)
        expect_tensor(last_page_len, "paged_kv_last_page_len", dtype=torch.int32, device_type="cpu", ndim=1)
        expect_tensor(indices, "paged_kv_indices", dtype=torch.int32, device_type=self.device.type, ndim=1)
        expect(int(indptr[0]) == 0 and bool((indptr[1:] >= indptr[:-1]).all()), "indptr must rise from 0")
        expect(int(indptr[-1]) == indices.numel(), "indptr[-1] must count the indices")
        expect(last_page_len.numel() == indptr.numel() - 1, "one last-page length per sequence")
        expect(bool(((last_page_len >= 1) & (last_page_len <= page_size)).all()), "1 <= last_page_len <= page_size")

    def _store(self, indptr, indices, last_page_len) -> dict:
        """In CUDA-graph mode the view is copied into the fixed buffers and read from them at run."""
        if not self.graph:
            return {"indptr": indptr, "indices": indices, "last": last_page_len}
        b = self.buffers
        expect(b["paged_kv_indptr_buffer"].numel() == indptr.numel(), "graph mode: indptr buffer is batch + 1 long")
        expect(b["paged_kv_last_page_len_buffer"].numel() == last_page_len.numel(), "graph mode: batch mismatch")
        expect(b["paged_kv_indices_buffer"].numel() >= indices.numel(), "graph mode: indices buffer too small")
        b["paged_kv_indptr_buffer"].copy_(indptr)
        b["paged_kv_indices_buffer"][: indices.numel()].copy_(indices)
        b["paged_kv_last_page_len_buffer"].copy_(last_page_len)
        return {
            "indptr": b["paged_kv_indptr_buffer"],
            "indices": b["paged_kv_indices_buffer"],
            "last": b["paged_kv_last_page_len_buffer"],
        }

    def _plan_common(
        self,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        sm_scale,
        window_left,
        logits_soft_cap,
        q_data_type,
        kv_data_type,
    ) -> dict:
        for value, what in (
            (num_qo_heads, "num_qo_heads"),
            (num_kv_heads, "num_kv_heads"),
            (head_dim, "head_dim"),
            (page_size, "page_size"),
        ):
            expect(isinstance(value, int) and value > 0, f"{what} must be a positive int")
        expect(num_qo_heads % num_kv_heads == 0, "num_qo_heads must be a multiple of num_kv_heads")
        expect(isinstance(sm_scale, float), "sm_scale is passed explicitly")
        expect(isinstance(q_data_type, torch.dtype) and q_data_type == kv_data_type, "q/kv data types given")
        window = window_left + 1 if window_left >= 0 else None
        return dict(
            heads=num_qo_heads,
            kv_heads=num_kv_heads,
            dim=head_dim,
            page_size=page_size,
            layer=layer_from(sm_scale, window, logits_soft_cap),
            dtype=q_data_type,
        )

    def run(self, q, paged_kv_cache):
        expect(self.planned is not None, "run before plan")
        p = self.planned
        expect(isinstance(paged_kv_cache, tuple) and len(paged_kv_cache) == 2, "paged_kv_cache is (k, v)")
        k_cache, v_cache = paged_kv_cache
        for cache, what in ((k_cache, "k_cache"), (v_cache, "v_cache")):
            expect_tensor(cache, what, dtype=p["dtype"], ndim=4)
            expect(tuple(cache.shape[1:]) == (p["page_size"], p["kv_heads"], p["dim"]), f"{what}: not NHD pages")
        expect_tensor(q, "q", dtype=p["dtype"], ndim=3)
        expect(q.is_contiguous() and q.shape[1:] == (p["heads"], p["dim"]), "q is [tokens, heads, dim], contiguous")
        self.recorder.record(f"{self.kind}.run", tokens=q.shape[0])
        view = p["view"]
        indptr, last = view["indptr"].tolist(), view["last"].tolist()
        rows = len(last)
        kv_lens = [(indptr[i + 1] - indptr[i] - 1) * p["page_size"] + last[i] for i in range(rows)]
        slots = [
            token_slots(view["indices"][indptr[i] : indptr[i + 1]], p["page_size"], kv_lens[i]) for i in range(rows)
        ]
        extend = p["qo_lens"] if p["qo_lens"] is not None else [1] * rows
        expect(sum(extend) == q.shape[0], "q rows must match the planned query lengths")
        buffer = torch.stack([k_cache.flatten(0, 1), v_cache.flatten(0, 1)])
        return reference_attention(q, buffer, kv_lens, extend, slots, p["layer"])


class BatchDecodeWithPagedKVCacheWrapper(_PagedWrapper):
    kind = "decode"

    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        use_tensor_cores=False,
        paged_kv_indptr_buffer=None,
        paged_kv_indices_buffer=None,
        paged_kv_last_page_len_buffer=None,
        *,
        recorder: Recorder,
    ) -> None:
        super().__init__(
            recorder,
            float_workspace_buffer,
            kv_layout,
            use_cuda_graph,
            paged_kv_indptr_buffer=paged_kv_indptr_buffer,
            paged_kv_indices_buffer=paged_kv_indices_buffer,
            paged_kv_last_page_len_buffer=paged_kv_last_page_len_buffer,
        )
        self.use_tensor_cores = use_tensor_cores
        recorder.record("decode.use_tensor_cores", value=use_tensor_cores)

    def plan(
        self,
        indptr,
        indices,
        last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        *,
        pos_encoding_mode="NONE",
        window_left=-1,
        logits_soft_cap=None,
        q_data_type=torch.float16,
        kv_data_type=None,
        sm_scale=None,
        non_blocking=True,
    ) -> None:
        expect(pos_encoding_mode == "NONE", "rotary is applied before attention")
        group = num_qo_heads // num_kv_heads
        expect(
            self.use_tensor_cores or group in CUDA_CORE_DECODE_GROUPS,
            f"Unsupported group_size: {group} (CUDA-core decode dispatches {CUDA_CORE_DECODE_GROUPS})",
        )
        self._check_pages(indptr, indices, last_page_len, page_size)
        common = self._plan_common(
            num_qo_heads,
            num_kv_heads,
            head_dim,
            page_size,
            sm_scale,
            window_left,
            logits_soft_cap,
            q_data_type,
            kv_data_type,
        )
        self.recorder.record("decode.plan", indptr=indptr.clone(), indices=indices.clone(), graph=self.graph)
        self.planned = {**common, "view": self._store(indptr, indices, last_page_len), "qo_lens": None}


class BatchPrefillWithPagedKVCacheWrapper(_PagedWrapper):
    kind = "prefill"

    def __init__(self, float_workspace_buffer, kv_layout="NHD", use_cuda_graph=False, *, recorder: Recorder) -> None:
        super().__init__(recorder, float_workspace_buffer, kv_layout, use_cuda_graph)

    def plan(
        self,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        page_size,
        *,
        causal=False,
        sm_scale=None,
        window_left=-1,
        logits_soft_cap=None,
        q_data_type=torch.float16,
        kv_data_type=None,
        non_blocking=True,
    ) -> None:
        expect_tensor(qo_indptr, "qo_indptr", dtype=torch.int32, device_type="cpu", ndim=1)
        expect(qo_indptr.numel() == paged_kv_indptr.numel(), "qo_indptr and paged_kv_indptr differ in length")
        expect(causal is True, "extend attention is causal")
        self._check_pages(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, page_size)
        common = self._plan_common(
            num_qo_heads,
            num_kv_heads,
            head_dim_qk,
            page_size,
            sm_scale,
            window_left,
            logits_soft_cap,
            q_data_type,
            kv_data_type,
        )
        qo_lens = (qo_indptr[1:] - qo_indptr[:-1]).tolist()
        self.recorder.record("prefill.plan", qo_lens=qo_lens, indptr=paged_kv_indptr.clone())
        self.planned = {
            **common,
            "view": self._store(paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len),
            "qo_lens": qo_lens,
        }


def build(recorder: Recorder) -> dict:
    """The stand-in `flashinfer` package and its submodules, recording into `recorder`."""

    def rows(x, what):
        expect_tensor(x, what, ndim=2)
        expect(x.is_contiguous(), f"{what} must be contiguous")

    def rmsnorm(input, weight, eps=1e-6, out=None):
        rows(input, "rmsnorm input")
        recorder.record("norm.rmsnorm", eps=eps)
        return rms_norm(input, weight, eps)

    def fused_add_rmsnorm(input, residual, weight, eps=1e-6):
        rows(input, "fused_add_rmsnorm input")
        rows(residual, "fused_add_rmsnorm residual")
        recorder.record("norm.fused_add_rmsnorm", eps=eps)
        normed, summed = fused_add_rms_norm(input, residual, weight, eps)
        input.copy_(normed)
        residual.copy_(summed)

    def silu_and_mul(input, out=None):
        expect(input.is_contiguous() and input.shape[-1] % 2 == 0, "silu_and_mul takes [..., 2d], contiguous")
        recorder.record("activation.silu_and_mul")
        gate, up = input.chunk(2, dim=-1)
        return F.silu(gate) * up

    def apply_rope_with_cos_sin_cache_inplace(positions, query, key, head_size, cos_sin_cache, is_neox=True):
        expect_tensor(positions, "positions", ndim=1)
        expect_tensor(query, "query", ndim=2)
        expect_tensor(key, "key", ndim=2)
        expect_tensor(cos_sin_cache, "cos_sin_cache", dtype=torch.float32, ndim=2)
        expect(
            query.shape[1] % head_size == 0 and key.shape[1] % head_size == 0, "query/key are [T, heads * head_size]"
        )
        recorder.record("rope.apply_rope_with_cos_sin_cache_inplace", head_size=head_size, is_neox=is_neox)
        q = query.view(query.shape[0], -1, head_size)
        k = key.view(key.shape[0], -1, head_size)
        q_rot, k_rot = apply_rotary(positions, q, k, cos_sin_cache, is_neox)
        query.copy_(q_rot.reshape(query.shape))
        key.copy_(k_rot.reshape(key.shape))

    def top_k_top_p_sampling_from_logits(
        logits, top_k, top_p, indices=None, deterministic=True, generator=None, filter_apply_order="top_k_first"
    ):
        expect_tensor(logits, "logits", dtype=torch.float32, ndim=2)
        expect_tensor(top_k, "top_k", dtype=torch.int32, ndim=1)
        expect_tensor(top_p, "top_p", dtype=torch.float32, ndim=1)
        expect(filter_apply_order == "joint", "our filters apply jointly on the original probabilities")
        recorder.record("sampling.top_k_top_p_sampling_from_logits", order=filter_apply_order)
        probs = filter_probs(logits.softmax(-1), top_k.long(), top_p, torch.zeros_like(top_p))
        return torch.multinomial(probs, 1).squeeze(1).to(torch.int32)

    def wrapper(cls):
        return lambda *args, **kwargs: cls(*args, recorder=recorder, **kwargs)

    norm = module("flashinfer.norm", rmsnorm=rmsnorm, fused_add_rmsnorm=fused_add_rmsnorm)
    activation = module("flashinfer.activation", silu_and_mul=silu_and_mul)
    rope = module("flashinfer.rope", apply_rope_with_cos_sin_cache_inplace=apply_rope_with_cos_sin_cache_inplace)
    sampling = module("flashinfer.sampling", top_k_top_p_sampling_from_logits=top_k_top_p_sampling_from_logits)
    root = module(
        "flashinfer",
        norm=norm,
        activation=activation,
        rope=rope,
        sampling=sampling,
        BatchDecodeWithPagedKVCacheWrapper=wrapper(BatchDecodeWithPagedKVCacheWrapper),
        BatchPrefillWithPagedKVCacheWrapper=wrapper(BatchPrefillWithPagedKVCacheWrapper),
        BatchMLAPagedAttentionWrapper=wrapper(BatchMLAPagedAttentionWrapper),
    )
    return {
        "flashinfer": root,
        "flashinfer.norm": norm,
        "flashinfer.activation": activation,
        "flashinfer.rope": rope,
        "flashinfer.sampling": sampling,
    }
