"""A recording stand-in of `torch_npu` (npu_fused_infer_attention_score over a block table,
npu_rms_norm, npu_add_rms_norm, npu_swiglu, and the MoE chain: npu_moe_gating_top_k_softmax,
npu_moe_init_routing, npu_moe_compute_expert_tokens, npu_grouped_matmul,
npu_moe_finalize_routing), computing with our references or the documented equivalent logic;
and `torch_npu.npu`'s graph capture (`NPUGraph`, `graph`, streams), emulated as below.

Where the rules come from: Ascend/op-plugin, which defines torch_npu's custom operators, at
commit 517f2e7d0f202f38b76310706cb977ca2388ad21 (master of 2026-08-21). The signatures are its
op_plugin/config/op_plugin_functions.yaml; every other rule is the operator's API page under
docs/zh/custom_APIs/torch_npu/, named at each check (torch_npu-npu_fused_infer_attention_score.md,
torch_npu-npu_add_rms_norm.md, the beta pages of npu_rms_norm and npu_swiglu, and the MoE pages).
The paged-prefill block-size rule reads the same on the 26.0.0 release branch (6ffd6e22).

The rules of npu_fused_infer_attention_score the adapter relies on: the query's sequence length
picks the branch. At Q_S = 1 (IncreFlashAttention) `sparse_mode`, `pre_tokens` and
`next_tokens` are ignored and a mask is `(B, KV_S)`; so the stand-in ignores them too and
rejects the 2048x2048 compressed mask there. At Q_S > 1 (PromptFlashAttention) a block table
needs `block_size` 128..512 in steps of 128, sparse modes 2-4 need the compressed mask, and
`actual_seq_lengths` are per-row lengths (cumulative only in the TND layout).

The MoE functions record each argument as `describe` gives it (dtype, shape and device of a
tensor, the value of a host scalar), so tests can check host versus device arguments."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from sglang.ops.norm import rms_norm

from .standin import Recorder, expect, expect_tensor, layer_from, module, reference_attention, token_slots


def describe(value: object) -> object:
    """A recordable summary: a tensor's dtype, shape and device type; lists element-wise; host
    values as they are."""
    if isinstance(value, torch.Tensor):
        return {"dtype": value.dtype, "shape": tuple(value.shape), "device": value.device.type}
    if isinstance(value, (list, tuple)):
        return [describe(v) for v in value]
    return value


_MOE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_ATTENTION_DTYPES = (torch.float16, torch.bfloat16)
_RMS_NORM_PAIRS = frozenset({(half, half) for half in _ATTENTION_DTYPES} | {(t, torch.float32) for t in _MOE_DTYPES})
_COMPRESSED_MASK = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)


class _CapturedOps(TorchDispatchMode):
    """What an NPU graph holds, emulated: every aten call made during capture, with the very
    tensors it read and wrote. A replay runs the calls again over those tensors and writes each
    result into the tensor the capture produced, so a replay sees exactly what a real graph sees:
    the current contents of the captured tensors, and nothing Python decided during capture
    (host values, new tensors, branches) ever changes. A host read of a device value inside
    capture is a contract error, as it is on the device (a capture cannot synchronize)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        expect(func is not torch.ops.aten._local_scalar_dense.default, "a host read inside NPU graph capture")
        out = func(*args, **kwargs)
        self.calls.append((func, args, kwargs, out))
        return out

    def replay(self) -> None:
        for func, args, kwargs, out in self.calls:
            fresh = func(*args, **kwargs)
            for old, new in zip(tree_leaves(out), tree_leaves(fresh)):
                # Views and in-place results alias the captured tensor already: nothing to copy.
                if (
                    isinstance(old, torch.Tensor)
                    and old.untyped_storage().data_ptr() != new.untyped_storage().data_ptr()
                ):
                    old.copy_(new)


def graph_module(recorder: Recorder) -> ModuleType:
    """`torch_npu.npu` for graph capture: streams, `NPUGraph` and the `graph` context."""
    ids = itertools.count()

    class Stream:
        def __init__(self) -> None:
            self.id = next(ids)

        def wait_stream(self, other: Stream) -> None:
            recorder.record("Stream.wait_stream", stream=self.id, waits_for=other.id)

    streams = [Stream()]

    def current_stream() -> Stream:
        return streams[-1]

    @contextmanager
    def stream(s: Stream) -> Iterator[None]:
        expect(isinstance(s, Stream), "stream() takes a torch.npu.Stream")
        recorder.record("stream", stream=s.id)
        streams.append(s)
        try:
            yield
        finally:
            streams.pop()

    class NPUGraph:
        def __init__(self) -> None:
            self.captured: _CapturedOps | None = None
            self.capturing: _CapturedOps | None = None

        def capture_begin(self, pool=None, capture_error_mode="global") -> None:
            expect(self.captured is None and self.capturing is None, "an NPUGraph is captured once")
            self.capturing = _CapturedOps()
            self.capturing.__enter__()
            recorder.record("NPUGraph.capture_begin", pool=pool, stream=current_stream().id)

        def capture_end(self) -> None:
            self.capturing.__exit__(None, None, None)
            self.captured, self.capturing = self.capturing, None
            recorder.record("NPUGraph.capture_end", calls=len(self.captured.calls))

        def replay(self) -> None:
            expect(self.captured is not None, "replay before capture")
            recorder.record("NPUGraph.replay")
            self.captured.replay()

    class graph:
        def __init__(self, npu_graph, pool=None, stream=None, auto_dispatch_capture=False, capture_error_mode="global"):
            expect(isinstance(npu_graph, NPUGraph), "graph() takes a torch.npu.NPUGraph")
            self.npu_graph, self.pool, self.mode = npu_graph, pool, capture_error_mode
            # Without a stream the context captures on a side stream of its own, as torch_npu's does.
            self.stream = stream if stream is not None else Stream()

        def __enter__(self) -> None:
            streams.append(self.stream)
            self.npu_graph.capture_begin(self.pool, capture_error_mode=self.mode)

        def __exit__(self, *exc) -> None:
            self.npu_graph.capture_end()
            streams.pop()

    return module(
        "torch_npu.npu", Stream=Stream, current_stream=current_stream, stream=stream, NPUGraph=NPUGraph, graph=graph
    )


def build(recorder: Recorder) -> dict:
    def npu_rms_norm(x, gamma, epsilon=1e-6):
        # (self, gamma) dtype pairs of the A2/A3 table: fp16/bf16 with themselves or fp32, fp32 with fp32.
        expect_tensor(x, "self")
        expect((x.dtype, gamma.dtype) in _RMS_NORM_PAIRS, f"self {x.dtype} with gamma {gamma.dtype}")
        expect(tuple(gamma.shape) == tuple(x.shape[x.dim() - gamma.dim() :]), "gamma is self's trailing shape")
        recorder.record("npu_rms_norm", epsilon=epsilon)
        return rms_norm(x, gamma, epsilon), torch.ones(x.shape[:-1])

    def npu_add_rms_norm(x1, x2, gamma, epsilon=1e-6):
        # x1, x2: fp32/fp16/bf16, no empty tensors; gamma in x1's dtype, x1's trailing shape.
        for t, what in ((x1, "x1"), (x2, "x2"), (gamma, "gamma")):
            expect_tensor(t, what, dtype=x1.dtype)
            expect(t.numel() > 0, f"{what}: empty tensors are not supported")
        expect(x1.dtype in _MOE_DTYPES and x1.shape == x2.shape, "x1 and x2: same shape, fp32/fp16/bf16")
        expect(tuple(gamma.shape) == tuple(x1.shape[x1.dim() - gamma.dim() :]), "gamma is x1's trailing shape")
        recorder.record("npu_add_rms_norm", epsilon=epsilon)
        summed = x1 + x2
        return rms_norm(summed, gamma, epsilon), torch.ones(x1.shape[:-1]), summed

    def npu_swiglu(x, dim=-1):
        # swish(A) * B, A the first half along dim; input contiguous, not empty, fp32/fp16/bf16.
        expect_tensor(x, "input")
        expect(x.dtype in _MOE_DTYPES, f"input: dtype {x.dtype} is not fp16/bf16/fp32")
        expect(x.is_contiguous() and x.numel() > 0, "input: non-contiguous and empty tensors are not supported")
        expect(dim == -1 and x.shape[-1] % 2 == 0, "the gate/up split is on an even last dimension")
        recorder.record("npu_swiglu")
        gate, up = x.chunk(2, dim=-1)
        return F.silu(gate) * up

    def npu_fused_infer_attention_score(
        query,
        key,
        value,
        *,
        pse_shift=None,
        atten_mask=None,
        actual_seq_lengths=None,
        actual_seq_lengths_kv=None,
        block_table=None,
        num_heads=1,
        scale=1.0,
        pre_tokens=2147483647,
        next_tokens=2147483647,
        input_layout="BSH",
        num_key_value_heads=0,
        sparse_mode=0,
        inner_precise=0,
        block_size=0,
        softmax_lse_flag=False,
    ):
        # Keyword-only after query, key, value (op_plugin_functions.yaml); the quantization,
        # prefix, padding and rope parameters are left out: an unquantized call passes none.
        dev = query.device.type
        # Query/key/value: fp16/bf16, ND, contiguous ("不支持非连续Tensor").
        for t, what in ((query, "query"), (key, "key"), (value, "value")):
            expect_tensor(t, what, device_type=dev)
            expect(t.dtype in _ATTENTION_DTYPES, f"{what}: dtype {t.dtype} is not fp16/bf16")
            expect(t.is_contiguous(), f"{what} must be contiguous")
        expect(key.shape == value.shape, "key and value shapes must be identical")
        expect(pse_shift is None and not softmax_lse_flag and inner_precise == 0, "no pse, no lse, high precision")
        kv_heads = num_key_value_heads or num_heads
        # num_key_value_heads: num_heads divisible by it, ratio <= 64; N <= 256.
        expect(num_heads % kv_heads == 0 and num_heads // kv_heads <= 64, "num_heads / num_key_value_heads <= 64")
        expect(num_heads <= 256, f"num_heads {num_heads} > 256")
        # PageAttention: block_table int32 [B, maxBlockNumPerSeq]; KV as (blocknum, block_size, H)
        # for BSH/BSND; actual_seq_lengths_kv required.
        expect_tensor(block_table, "block_table", dtype=torch.int32, device_type=dev, ndim=2)
        expect(key.dim() == 3 and key.shape[1] == block_size, "BSH/BSND paged KV is (blocknum, block_size, H)")
        dim = key.shape[2] // kv_heads
        expect(key.shape[2] == kv_heads * dim, "H is num_key_value_heads * D")
        # D <= 512 and 16-byte aligned for fp16/bf16.
        expect(dim <= 512 and dim * query.element_size() % 16 == 0, f"head dim {dim}: <= 512, 16-byte aligned")
        expect(isinstance(actual_seq_lengths_kv, list), "actual_seq_lengths_kv is a host list (PageAttention)")
        if input_layout == "BSH":
            expect(query.dim() == 3 and query.shape[2] == num_heads * dim, "BSH query is (B, S, N * D)")
            batch, q_len = query.shape[:2]
        else:
            expect(input_layout == "BSND", f"input_layout {input_layout!r}: BSH or BSND with BnBsH pages")
            expect(query.dim() == 4 and tuple(query.shape[2:]) == (num_heads, dim), "BSND query is (B, S, N, D)")
            batch, q_len = query.shape[:2]
        expect(block_table.shape[0] == batch, "block_table is [B, maxBlockNumPerSeq]")
        capacity = block_table.shape[1] * block_size
        lens = actual_seq_lengths_kv
        expect(len(lens) == batch, "one KV length per batch row")
        expect(all(0 < n <= capacity for n in lens), "an actual KV length exceeds the row's blocks")
        if q_len == 1:
            # Decode branch (IncreFlashAttention): block_size nonzero, at most 512; sparse_mode,
            # pre_tokens and next_tokens are ignored; a mask is (B, KV_S) with KV_S at least the
            # block table's width times block_size.
            # `actual_seq_lengths` is not read there (non-TND), so it is not checked either.
            expect(0 < block_size <= 512, f"block_size {block_size}: decode takes (0, 512]")
            mask = None
            if atten_mask is not None:
                expect_tensor(atten_mask, "atten_mask", dtype=torch.bool, device_type=dev, ndim=2)
                expect(
                    atten_mask.shape[0] == batch and atten_mask.shape[1] >= capacity,
                    "at Q_S = 1 a mask is (B, KV_S), KV_S >= block_table width * block_size; sparse_mode is ignored",
                )
                mask = atten_mask
            extend = [1] * batch
            window = None
        else:
            # Prefill branch (PromptFlashAttention): over a block table, block_size 128..512 in
            # steps of 128; sparse modes 2-4 take the 2048x2048 compressed mask,
            # triu(ones, diagonal=1) as the npu_fusion_attention page builds it.
            expect(
                block_size % 128 == 0 and 128 <= block_size <= 512,
                f"block_size {block_size}: with Q_S > 1 PageAttention takes 128..512 in steps of 128",
            )
            expect(sparse_mode in (3, 4), "causal attention takes sparse mode 3 (rightDownCausal) or 4 (band)")
            expect_tensor(atten_mask, "atten_mask", dtype=torch.bool, device_type=dev, ndim=2)
            expect(atten_mask.shape == (2048, 2048), "sparse modes 2-4 take the (2048, 2048) compressed mask")
            if atten_mask.data_ptr() not in recorder.seen_workspaces:
                expect(torch.equal(atten_mask.cpu(), _COMPRESSED_MASK), "the compressed mask is triu(ones, 1)")
                recorder.seen_workspaces.add(atten_mask.data_ptr())
            expect(next_tokens == 0, "nothing right of the query is visible")
            # Non-TND: per-batch lengths, each at most the query's S (not cumulative).
            expect(isinstance(actual_seq_lengths, list) and len(actual_seq_lengths) == batch, "a host list per row")
            expect(all(0 < n <= q_len for n in actual_seq_lengths), "actual_seq_lengths are per row, <= Q_S")
            mask = None
            extend = actual_seq_lengths
            window = pre_tokens + 1 if sparse_mode == 4 else None
        recorder.record(
            "npu_fused_infer_attention_score",
            layout=input_layout,
            lengths=list(lens),
            block_size=block_size,
            masked=atten_mask is not None,
            sparse_mode=sparse_mode if q_len > 1 else None,
        )
        q = query.reshape(batch * q_len, num_heads, dim)
        slots = [token_slots(block_table[r, : -(-lens[r] // block_size)], block_size, lens[r]) for r in range(batch)]
        buffer = torch.stack([key.reshape(-1, kv_heads, dim), value.reshape(-1, kv_heads, dim)])
        if mask is None:
            out = reference_attention(q, buffer, lens, extend, slots, layer_from(scale, window, None))
        else:
            # Our adapter masks only a sliding window's left part: each row's visible keys are a
            # suffix of its sequence, the reference's window.
            rows = []
            for r in range(batch):
                visible = (~mask[r, : lens[r]]).nonzero().flatten().tolist()
                expect(visible == list(range(lens[r] - len(visible), lens[r])), "a window mask keeps a suffix")
                layer = layer_from(scale, len(visible), None)
                rows.append(reference_attention(q[r : r + 1], buffer, lens[r : r + 1], [1], slots[r : r + 1], layer))
            out = torch.cat(rows)
        return out.view(query.shape), torch.zeros(1)

    def npu_moe_gating_top_k_softmax(x, finished=None, k=1):
        expect_tensor(x, "x", ndim=2)
        expect(x.dtype in _MOE_DTYPES, f"x: dtype {x.dtype} is not fp16/bf16/fp32")
        expect(finished is None or finished.dtype == torch.bool, "finished is a bool mask or None")
        expect(isinstance(k, int) and 0 < k <= min(x.shape[-1], 1024), f"k={k!r}: a host int in (0, min(E, 1024)]")
        recorder.record("npu_moe_gating_top_k_softmax", x=describe(x), finished=describe(finished), k=k)
        values, ids = x.float().softmax(-1).topk(k, dim=-1)
        rows = x.shape[0]
        row_idx = torch.arange(rows * k, dtype=torch.int32, device=x.device).view(k, rows).t()
        return values.to(x.dtype), ids.to(torch.int32), row_idx

    def npu_moe_init_routing(x, row_idx, expert_idx, active_num):
        expect_tensor(x, "x", ndim=2)
        expect(x.dtype in _MOE_DTYPES, f"x: dtype {x.dtype} is not fp16/bf16/fp32")
        expect_tensor(expert_idx, "expert_idx", dtype=torch.int32, device_type=x.device.type, ndim=2)
        expect_tensor(row_idx, "row_idx", dtype=torch.int32, device_type=x.device.type, ndim=2)
        expect(row_idx.shape == expert_idx.shape, "row_idx has expert_idx's shape")
        expect(isinstance(active_num, int) and not isinstance(active_num, bool), "active_num is a host int")
        rows, k = expert_idx.shape
        gating_layout = torch.arange(rows * k, dtype=torch.int32).view(k, rows).t()
        expect(torch.equal(row_idx.cpu(), gating_layout), "row_idx is the gating layout row_idx[t, j] = j * T + t")
        recorder.record(
            "npu_moe_init_routing",
            x=describe(x),
            row_idx=describe(row_idx),
            expert_idx=describe(expert_idx),
            active_num=active_num,
        )
        # The documented equivalent logic: a stable sort of the flattened expert ids.
        order = expert_idx.reshape(-1).long().argsort(stable=True)
        sorted_rows = row_idx.reshape(-1)[order].long()
        expanded_row_idx = torch.empty_like(sorted_rows)
        expanded_row_idx[sorted_rows] = torch.arange(sorted_rows.numel(), device=x.device)
        expanded_x = x[sorted_rows[: min(active_num, rows) * k] % rows]
        return expanded_x, expanded_row_idx.to(torch.int32), expert_idx.reshape(-1)[order]

    def npu_moe_compute_expert_tokens(sorted_expert_for_source_row, num_expert):
        ids = expect_tensor(sorted_expert_for_source_row, "sorted_expert_for_source_row", dtype=torch.int32, ndim=1)
        expect(isinstance(num_expert, int) and num_expert > 0, "num_expert is a positive host int")
        expect(bool((ids[1:] >= ids[:-1]).all()), "sorted_expert_for_source_row is sorted")
        recorder.record(
            "npu_moe_compute_expert_tokens", sorted_expert_for_source_row=describe(ids), num_expert=num_expert
        )
        experts = torch.arange(num_expert, dtype=torch.int32, device=ids.device)
        return torch.searchsorted(ids, experts, right=True).to(torch.int32)

    def npu_grouped_matmul(
        x,
        weight,
        *,
        bias=None,
        scale=None,
        offset=None,
        antiquant_scale=None,
        antiquant_offset=None,
        per_token_scale=None,
        group_list=None,
        activation_input=None,
        activation_quant_scale=None,
        activation_quant_offset=None,
        split_item=0,
        group_type=-1,
        group_list_type=0,
        act_type=0,
        output_dtype=None,
        tuning_config=None,
    ):
        expect(isinstance(x, list) and len(x) == 1, "x is a list of one tensor (the single-tensor form)")
        expect(isinstance(weight, list) and len(weight) == 1, "weight is a list of one tensor")
        rows, w = expect_tensor(x[0], "x[0]", ndim=2), expect_tensor(weight[0], "weight[0]", dtype=x[0].dtype, ndim=3)
        expect(rows.dtype in _MOE_DTYPES, f"x: dtype {rows.dtype} is not fp16/bf16/fp32")
        expect(w.shape[1] == rows.shape[1], "weight[0] is [E, K, N] with x's K")
        expect(split_item in (2, 3), "one output tensor takes split_item 2 or 3")
        expect(group_type == 0 and group_list_type == 0, "m-axis groups from a cumulative group list")
        expect(act_type == 0 and output_dtype is None, "no fused activation, output in x's dtype")
        unquantized = (bias, scale, offset, antiquant_scale, antiquant_offset, per_token_scale, activation_input)
        expect(all(a is None for a in unquantized), "an unquantized matmul passes no bias or scales")
        ends = expect_tensor(group_list, "group_list", dtype=torch.int64, device_type=rows.device.type, ndim=1)
        expect(ends.numel() == w.shape[0] <= 1024, "one group per expert, at most 1024")
        expect(bool((ends[1:] >= ends[:-1]).all()) and int(ends[-1]) == rows.shape[0], "cumulative, ending at M")
        recorder.record(
            "npu_grouped_matmul",
            x=describe(x),
            weight=describe(weight),
            weight_contiguous=w.is_contiguous(),
            group_list=describe(ends),
            split_item=split_item,
            group_type=group_type,
            group_list_type=group_list_type,
        )
        out = torch.empty(rows.shape[0], w.shape[2], dtype=rows.dtype, device=rows.device)
        start = 0
        for expert, end in enumerate(ends.tolist()):
            out[start:end] = (rows[start:end].float() @ w[expert].float()).to(rows.dtype)
            start = end
        return [out]

    def npu_moe_finalize_routing(
        expanded_permuted_rows,
        skip1,
        skip2,
        bias,
        scales,
        expanded_src_to_dst_row,
        expert_for_source_row,
        /,
        drop_pad_mode=0,
    ):
        # Positional only: the last tensor parameter is `export_for_source_row` in some releases
        # and `expert_for_source_row` in others, so only a positional call works on both.
        rows = expect_tensor(expanded_permuted_rows, "expanded_permuted_rows", ndim=2)
        device = rows.device.type
        expect(skip1 is None and skip2 is None and bias is None, "no skip terms or expert bias here")
        expect_tensor(scales, "scales", dtype=rows.dtype, device_type=device, ndim=2)
        tokens, k = scales.shape
        expect_tensor(expanded_src_to_dst_row, "expanded_src_to_dst_row", dtype=torch.int32, device_type=device, ndim=1)
        expect_tensor(expert_for_source_row, "expert_for_source_row", dtype=torch.int32, device_type=device, ndim=2)
        expect(rows.shape[0] == expanded_src_to_dst_row.numel() == tokens * k, "N * K expanded rows")
        expect(tuple(expert_for_source_row.shape) == (tokens, k), "expert_for_source_row is [N, K]")
        expect(drop_pad_mode == 0, "dropless, column order")
        recorder.record(
            "npu_moe_finalize_routing",
            expanded_permuted_rows=describe(rows),
            scales=describe(scales),
            expanded_src_to_dst_row=describe(expanded_src_to_dst_row),
            expert_for_source_row=describe(expert_for_source_row),
        )
        # out[i] = sum_k scales[i, k] * rows[expanded_src_to_dst_row[k * N + i]]
        picked = rows[expanded_src_to_dst_row.long().view(k, tokens).t()].float()
        return (picked * scales.float()[..., None]).sum(1).to(rows.dtype)

    root = module(
        "torch_npu",
        npu_rms_norm=npu_rms_norm,
        npu_add_rms_norm=npu_add_rms_norm,
        npu_swiglu=npu_swiglu,
        npu_fused_infer_attention_score=npu_fused_infer_attention_score,
        npu_moe_gating_top_k_softmax=npu_moe_gating_top_k_softmax,
        npu_moe_init_routing=npu_moe_init_routing,
        npu_moe_compute_expert_tokens=npu_moe_compute_expert_tokens,
        npu_grouped_matmul=npu_grouped_matmul,
        npu_moe_finalize_routing=npu_moe_finalize_routing,
        npu=graph_module(recorder),
    )
    return {"torch_npu": root, "torch_npu.npu": root.npu}
