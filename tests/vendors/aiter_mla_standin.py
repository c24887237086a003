"""A recording stand-in of AITER's `aiter.mla.mla_decode_fwd`, computing with our reference. See
`standin` for what a stand-in is and is not.

Each rule names where AITER states it (ROCm/aiter at commit e4048607a535ace3a2b51ded31b1c8c2d45c0879,
main of 2026-08-22, the commit `aiter_standin` was read at):
- aiter/mla.py `mla_decode_fwd(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices,
  kv_last_page_lens, max_seqlen_q, page_size=1, nhead_kv=1, sm_scale=None, logit_cap=0.0,
  num_kv_splits=None, num_kv_splits_indptr=None, work_meta_data=None, ...)`: it asserts
  `logit_cap <= 0`; unpacks `kv_buffer` as `[num_page, page_size, nhead_kv, qk_head_dim]` and `o`
  as `[total_s, nhead, v_head_dim]`; takes `bs = qo_indptr.shape[0] - 1`; without
  `work_meta_data` it runs the non-persistent kernels and picks `num_kv_splits` itself
  (`get_meta_param`); it returns `(logits, final_lse)`, where `logits` is a view of `o` only for
  one split and otherwise the float32 `[total_s, num_kv_splits, nhead, v_head_dim]` partials:
  the result is what it wrote to `o`;
- aiter/mla.py `_fwd_kernel_stage2_asm`: `kv_indptr` counts tokens when `page_size == 1`
  (`KV_INDPTR_IS_PAGE_LEVEL = page_size > 1`), else pages, the last one
  `kv_last_page_lens[b]` tokens long;
- csrc/py_itfs_cu/asm_mla.cu `mla_decode_stage1_asm_fwd`: `Q.is_contiguous()`, `num_kv_heads == 1`,
  `head_size == KV.size(3)`; Q bf16 or fp8 ("unsupport Q dtype" otherwise; fp8 needs scales, not
  used here), KV bf16, fp8 or bytes; the CSR arrays and `qo_indptr` are read through their data
  pointers as int32 (`get_meta_param` builds its own indptr as `torch.int`); only the page stride
  `KV->stride(0)` is passed, so a page's rows are contiguous; `log2f(page_size)`: a power of two;
  the kernel is looked up by (Q type, KV type, query heads per KV head, persistent, query length)
  in hsa/<arch>/mla/mla_asm.csv, which for a bf16 non-persistent single-token decode lists 8, 16,
  32 and 128 heads on gfx942 (and 64 too on gfx950);
- the kernels take DeepSeek's rows: query and cache rows of 576 (`kv_lora_rank` 512 +
  `qk_rope_head_dim` 64) and an output of the 512 latent columns, the value being the rows' first
  `kv_lora_rank` columns (op_tests/test_mla.py: its defaults 512 / 64 and its reference
  `torch_mla_extend`, `torch.split(kvc, [kv_lora_rank, qk_rope_head_dim])`; the gfx1250 dispatch
  in asm_mla.cu checks `Q->size(2) == 576` and `output->size(2) == 512`).
"""

from __future__ import annotations

from itertools import pairwise

import torch

from .standin import Recorder, expect, expect_tensor, latent_attention, token_slots

KV_LORA_RANK, ROPE_DIM = 512, 64
"""op_tests/test_mla.py's defaults: the DeepSeek row the kernels are built for."""
DECODE_HEADS = (8, 16, 32, 128)
"""hsa/gfx942/mla/mla_asm.csv: bf16 non-persistent single-token decode kernels, by query heads."""


def build(recorder: Recorder):
    """`mla_decode_fwd` recording on `recorder`."""

    def mla_decode_fwd(
        q,
        kv_buffer,
        o,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_last_page_lens,
        max_seqlen_q,
        page_size=1,
        nhead_kv=1,
        sm_scale=None,
        logit_cap=0.0,
        num_kv_splits=None,
        num_kv_splits_indptr=None,
        work_meta_data=None,
        work_indptr=None,
        work_info_set=None,
        reduce_indptr=None,
        reduce_final_map=None,
        reduce_partial_map=None,
        q_scale=None,
        kv_scale=None,
        intra_batch_mode=False,
        return_logits=False,
        return_lse=False,
        g_kv_indptr=None,
        cp_world_size=1,
        cp_rank=0,
        causal=True,
    ):
        dev = q.device.type
        expect(logit_cap <= 0, f"logit_cap={logit_cap} is not support yet")
        total, heads, width = expect_tensor(q, "q", dtype=torch.bfloat16, ndim=3).shape
        expect(q.is_contiguous(), "only support Q.is_contiguous()")
        expect_tensor(kv_buffer, "kv_buffer", dtype=q.dtype, device_type=dev, ndim=4)
        expect(nhead_kv == 1 and kv_buffer.shape[2] == 1, "only support num_kv_heads==1")
        expect(kv_buffer.shape[3] == width == KV_LORA_RANK + ROPE_DIM, "q and kv rows are 512 + 64 wide")
        expect(kv_buffer.shape[1] == page_size and page_size & (page_size - 1) == 0, "pages of 2^k tokens")
        expect(kv_buffer[0].is_contiguous(), "only the page stride reaches the kernel: a page's rows are contiguous")
        expect_tensor(o, "o", dtype=q.dtype, device_type=dev, ndim=3)
        expect(tuple(o.shape) == (total, heads, KV_LORA_RANK), "o is [total_s, nhead, kv_lora_rank]")
        expect(heads in DECODE_HEADS, f"no bf16 decode kernel for {heads} heads per KV head")
        for t, what in (
            (qo_indptr, "qo_indptr"),
            (kv_indptr, "kv_indptr"),
            (kv_indices, "kv_indices"),
            (kv_last_page_lens, "kv_last_page_lens"),
        ):
            expect_tensor(t, what, dtype=torch.int32, device_type=dev, ndim=1)
        expect(isinstance(sm_scale, float), "sm_scale is a float")
        schedule = (work_meta_data, work_indptr, work_info_set, reduce_indptr, reduce_final_map, reduce_partial_map)
        expect(all(t is None for t in schedule), "the persistent kernels need get_mla_metadata_v1's schedule")
        expect(q_scale is None and kv_scale is None and g_kv_indptr is None, "bf16, no context parallelism")
        expect(num_kv_splits is None and num_kv_splits_indptr is None, "AITER picks the splits")
        qo, kv, last = qo_indptr.tolist(), kv_indptr.tolist(), kv_last_page_lens.tolist()
        rows = len(qo) - 1
        expect(max_seqlen_q == 1 and qo == list(range(rows + 1)) and total == rows, "one query per row")
        expect(len(kv) == rows + 1 and len(last) == rows, "kv_indptr is [bs + 1], kv_last_page_lens [bs]")
        expect(kv[0] == 0 and all(b >= a for a, b in pairwise(kv)), "kv_indptr rises from 0")
        expect(kv_indices.numel() >= kv[-1], "kv_indices holds kv_indptr[-1] entries")
        expect(all(0 < n <= page_size for n in last), "a last page holds 1 to page_size tokens")
        lens = [(b - a - 1) * page_size + n for (a, b), n in zip(pairwise(kv), last)]
        recorder.record("mla_decode_fwd", rows=rows, heads=heads, page_size=page_size, kv_lens=lens)
        slots = [token_slots(kv_indices[a:b], page_size, n) for (a, b), n in zip(pairwise(kv), lens)]
        attended = latent_attention(q, kv_buffer.flatten(0, 2), KV_LORA_RANK, lens, [1] * rows, slots, sm_scale)
        o.copy_(attended)
        # One split or not, the caller must read `o`: these partials are not the output.
        logits = torch.full((total, 2, heads, KV_LORA_RANK), float("nan"), device=q.device)
        return logits, None

    return mla_decode_fwd
