"""The stand-in of each vendor family: how to build it and which cases reach the vendor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sglang.ops.selection import Candidate

from . import aiter_standin, flashinfer_standin, torch_npu_standin, xpu_standin


def _always(candidate: Candidate, case, args) -> bool:
    return True


def _sampling_may_fall_back(candidate: Candidate, case, args) -> bool:
    """Sampling adapters take the reference for rows the vendor cannot serve (seeds, min-p)."""
    return candidate.op == "sample"


def _moe_gelu(candidate: Candidate, case, args) -> bool:
    """AITER's MoE adapter sends SiLU experts whose weights its shuffle tiles (rows % 16, columns
    % 32) only; others take the reference."""
    if candidate.op != "moe_experts":
        return False
    tiled = all(w.shape[-2] % 16 == 0 and w.shape[-1] % 32 == 0 for w in args[1:3])
    return args[-1] != "silu" or not tiled


def _npu_pages(candidate: Candidate, case, args) -> bool:
    """The NPU operator's prefill branch reads blocks of 128 to 512 tokens in steps of 128
    (`test_torch_npu_attention` runs it there): smaller pages are never handed to it."""
    return case.page_size is None or case.page_size % 128 == 0


def _npu_reference_cases(candidate: Candidate, case, args) -> bool:
    """The NPU attention operator has no logit soft-cap and its gating op scores by softmax only:
    soft-capped layers and sigmoid routing take the reference."""
    return "softcap" in case.name or (candidate.op == "moe_route" and args[2] != "softmax")


@dataclass(frozen=True)
class VendorSpec:
    build: Callable
    package: str
    """Our adapter package, re-imported against the stand-in."""
    serves: Callable = _always
    may_skip_vendor: Callable = _sampling_may_fall_back


VENDORS: dict[str, VendorSpec] = {
    "flashinfer": VendorSpec(flashinfer_standin.build, "sglang.platforms.kernels.flashinfer"),
    "aiter": VendorSpec(aiter_standin.build, "sglang.platforms.kernels.aiter", may_skip_vendor=_moe_gelu),
    "torch_npu": VendorSpec(
        torch_npu_standin.build,
        "sglang.platforms.kernels.torch_npu",
        serves=_npu_pages,
        may_skip_vendor=_npu_reference_cases,
    ),
    "ipex": VendorSpec(xpu_standin.build, "sglang.platforms.kernels.ipex", serves=xpu_standin.serves),
}
