"""FlashInfer's decode rules the adapter must meet, against the stand-in that encodes them.

Each test here fails on the adapter as it was before issue 29: decode wrappers built without
tensor cores (GQA group 7 plans "Unsupported group_size") and a workspace from `torch.empty`.
"""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites import paged_attention_cases as pac
from sglang.ops.attention import ReferenceAttention
from sglang.platforms.kernels.flashinfer.family import CUDA_CORE_DECODE_GROUPS, MAX_CUDA_CORE_GROUP

from . import flashinfer_standin
from .standin import ContractError, Recorder, installed

ADAPTER = "sglang.platforms.kernels.flashinfer"


def _backend_class():
    from sglang.platforms.kernels.flashinfer.attention import FlashInferAttention

    def build(*args):
        backend = FlashInferAttention(*args)
        backend.page_size = 16
        return backend

    return build


def _scenario(layer: str) -> pac.AttentionScenario:
    return pac.build("decode", layer, 16, torch.bfloat16, torch.Generator().manual_seed(len(layer)))


def test_every_cuda_core_group_is_dispatched() -> None:
    """The adapter decodes on CUDA cores only for groups the vendor's dispatch instantiates."""
    assert set(range(1, MAX_CUDA_CORE_GROUP + 1)) <= CUDA_CORE_DECODE_GROUPS
    assert set(flashinfer_standin.CUDA_CORE_DECODE_GROUPS) == CUDA_CORE_DECODE_GROUPS


@pytest.mark.parametrize(("layer", "tensor_cores"), [("gqa7_d128", True), ("gqa5_d256", True), ("gqa", False)])
def test_decode_path_follows_the_gqa_group(layer: str, tensor_cores: bool, monkeypatch) -> None:
    """Groups 7 (Qwen2.5-7B: 28/4) and 5 decode on tensor cores, group 3
    on CUDA cores."""
    recorder = Recorder()
    scenario = _scenario(layer)
    expected = pac.run(ReferenceAttention, scenario)
    with installed(monkeypatch, flashinfer_standin.build(recorder), ADAPTER):
        actual = pac.run(_backend_class(), scenario)
    assert recorder.last("decode.use_tensor_cores")["value"] is tensor_cores
    assert "decode.run" in recorder.names()
    torch.testing.assert_close(actual[1].float(), expected[1].float(), atol=2e-2, rtol=2e-2)


def test_standin_rejects_groups_cuda_cores_do_not_dispatch(monkeypatch) -> None:
    """The stand-in holds the vendor's rule, so the adapter cannot pass by accident."""
    recorder = Recorder()
    modules = flashinfer_standin.build(recorder)
    workspace = torch.zeros(flashinfer_standin.WORKSPACE_BYTES, dtype=torch.uint8)
    wrapper = modules["flashinfer"].BatchDecodeWithPagedKVCacheWrapper(workspace, "NHD")
    one = torch.ones(1, dtype=torch.int32)
    with pytest.raises(ContractError, match="Unsupported group_size: 7"):
        wrapper.plan(torch.tensor([0, 1], dtype=torch.int32), one - 1, one, 7, 1, 128, 16, sm_scale=0.1)


def test_workspace_is_zeroed_whatever_the_allocator_hands_back(monkeypatch) -> None:
    """On a GPU the caching allocator returns used memory; `torch.empty` would keep its bytes."""
    real_empty = torch.empty

    def dirty_empty(*args, **kwargs):
        out = real_empty(*args, **kwargs)
        return out.fill_(0xFF) if out.dtype == torch.uint8 else out

    recorder = Recorder()
    scenario = _scenario("gqa")
    with installed(monkeypatch, flashinfer_standin.build(recorder), ADAPTER):
        monkeypatch.setattr(torch, "empty", dirty_empty)
        pac.run(_backend_class(), scenario)
    assert "decode.run" in recorder.names()
