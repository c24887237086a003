"""The aiter family: AMD's AITER kernels on ROCm GPUs.

PyPI `amd-aiter` installs the import name `aiter`, which PyPI's unrelated asyncio package `aiter`
also takes: every candidate requires the submodule `aiter.ops`, which only AMD's package has, so
the asyncio package never makes a candidate eligible. AITER's attention and MoE kernels take
fp16/bf16; its decode kernel takes head dims 64 and 128 (and 256 on the ragged path), and pages
of at most 32 tokens that divide its 256-token partition (`paged_attention_ll4mi_QKV_mfma16_kernel`
asserts `BLOCK_SIZE <= 32` for 16-bit KV, csrc/cpp_itfs/pa/pa_kernels.cuh), so larger pools take
another family.

MLA (`mla_backend`) decodes through `aiter.mla.mla_decode_fwd` in the absorbed form and extends
through SDPA (`mla.py`). Its assembly kernels (csrc/py_itfs_cu/asm_mla.cu
`mla_decode_stage1_asm_fwd`, looked up in hsa/<arch>/mla/mla_asm.csv) take bf16 queries over a
bf16 cache (fp16 is refused: "unsupport Q dtype"; fp8 is not used here), one KV head, DeepSeek's
cached row of 512 latent + 64 rotary values (the value its first 512), and exist for gfx942 and
gfx950 only. For a single-token bf16 decode without the persistent scheduler both ship kernels
for 8, 16, 32 and 128 query heads per KV head; 64 has one on gfx950 only (added by aiter's
c849fd5845 to gfx950's table alone, while the dispatch asks for it on both), so it is not
declared. With one KV head that ratio is the heads per rank: DeepSeek V3's 128 heads take aiter
at tp 1, 4 and 8, and V2-Lite's 16 at tp 1 and 2.
"""

import torch

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.aiter"
_HALF = frozenset({torch.float16, torch.bfloat16})
_AITER = ("aiter.ops",)
_NORM = Requirements(dtypes=_HALF, packages=_AITER)
_ATTENTION = Requirements(
    dtypes=_HALF,
    head_dims=frozenset({64, 128, 256}),
    page_sizes=frozenset({1, 2, 4, 8, 16, 32}),
    packages=_AITER,
)
MLA_PATH = "decode: aiter mla_decode_fwd; extend: SDPA"
"""The code paths of AITER's MLA candidate: AITER has MLA kernels for decode only."""
MLA_KV_LORA_RANK = 512
"""The latent width AITER's MLA decode kernels are built for; the value is that many columns."""
MLA_ROPE_DIM = 64
"""The rotary key width after the latent in each cached row."""
MLA_DECODE_HEADS = frozenset({8, 16, 32, 128})
"""Query heads per KV head with a bf16 single-token decode kernel on both gfx942 and gfx950
(hsa/gfx942/mla/mla_asm.csv, hsa/gfx950/mla/mla_asm.csv at ROCm/aiter e4048607)."""
_MLA = Requirements(
    dtypes=frozenset({torch.bfloat16}),
    head_dims=frozenset({MLA_KV_LORA_RANK + MLA_ROPE_DIM}),
    gqa_ratios=MLA_DECODE_HEADS,
    packages=(*_AITER, "aiter.mla"),
    device_archs=frozenset({"gfx942", "gfx950"}),
)
_MOE = Requirements(dtypes=_HALF, packages=(*_AITER, "aiter.ops.shuffle", "aiter.fused_moe"))

FAMILY = KernelFamily(
    name="aiter",
    description="AITER: ragged paged decode, varlen extend attention, MLA decode (absorbed, 512 + 64 "
    "latent rows, gfx942/gfx950), rmsnorm2d (plain and fused add), "
    "fused MoE over weights shuffled once",
    candidates=(
        Candidate("attention_backend", "aiter", f"{_HERE}.attention:AiterAttention", requires=_ATTENTION),
        Candidate("mla_backend", "aiter", f"{_HERE}.mla:AiterMLA", requires=_MLA, path=lambda ctx: MLA_PATH),
        Candidate("rms_norm", "aiter", f"{_HERE}.norm:rms_norm", requires=_NORM),
        Candidate("fused_add_rms_norm", "aiter", f"{_HERE}.norm:fused_add_rms_norm", requires=_NORM),
        Candidate("moe_experts", "aiter", f"{_HERE}.moe:moe_experts", requires=_MOE),
    ),
)
