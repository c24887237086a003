"""AITER's MoE adapter against the stand-in: weights shuffled once, in place, at load.

Before issue 29 the adapter kept shuffled copies in a `weakref.WeakKeyDictionary` keyed by
tensors: the second lookup compared tensors element-wise and raised, and a second full copy of
every expert weight was allocated at the first request, after the KV pool was sized.
"""

from __future__ import annotations

import torch

from sglang.ci.suites.op_cases import CASES
from sglang.ops import moe as reference
from sglang.ops.binding import restore, snapshot

from . import aiter_standin
from .standin import Recorder, installed

ADAPTER = "sglang.platforms.kernels.aiter"
CASE = next(c for c in CASES if c.id == "moe_experts-e8_top2_tiled")


def test_second_forward_reuses_the_weights_in_place(monkeypatch) -> None:
    recorder = Recorder()
    x, w13, w2, weights, ids, act = CASE.make(torch.Generator().manual_seed(0), torch.bfloat16)
    expected = reference.moe_experts(x, w13, w2, weights, ids, act)
    storage = (w13.data_ptr(), w2.data_ptr())
    with installed(monkeypatch, aiter_standin.build(recorder), ADAPTER):
        from sglang.platforms.kernels.aiter.moe import moe_experts

        outputs = [moe_experts(x, w13, w2, weights, ids, act) for _ in range(3)]
    assert recorder.names().count("shuffle_weight") == 2, "each weight is shuffled exactly once"
    assert recorder.names().count("fused_moe") == 3
    assert (w13.data_ptr(), w2.data_ptr()) == storage and w13.is_shuffled and w2.is_shuffled
    for out in outputs:
        torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)


def test_untileable_experts_take_the_reference_unshuffled(monkeypatch) -> None:
    recorder = Recorder()
    case = next(c for c in CASES if c.id == "moe_experts-e8_top2")
    x, w13, w2, weights, ids, act = case.make(torch.Generator().manual_seed(1), torch.bfloat16)
    with installed(monkeypatch, aiter_standin.build(recorder), ADAPTER):
        from sglang.platforms.kernels.aiter.moe import moe_experts

        moe_experts(x, w13, w2, weights, ids, act)
    assert recorder.calls == [] and not hasattr(w13, "is_shuffled")


def test_load_primes_the_shuffle_before_any_request(monkeypatch) -> None:
    """`prime_moe_layers` (run by the loader before the KV pool is sized) shuffles every MoE
    layer's experts with the kernel bound for `moe_experts`."""
    from sglang import ops
    from sglang.runtime.layers.moe import SparseMoE, prime_moe_layers
    from sglang.runtime.models.config import ModelConfig

    config = ModelConfig.from_dict(
        {
            "architectures": ["Qwen2MoeForCausalLM"],
            "model_type": "qwen2_moe",
            "hidden_size": 64,
            "intermediate_size": 64,
            "moe_intermediate_size": 32,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "num_hidden_layers": 1,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 32,
        }
    )
    layer = SparseMoE(config, torch.bfloat16)
    for p in layer.parameters():
        p.data.normal_()
    recorder = Recorder()
    saved = snapshot()
    try:
        with installed(monkeypatch, aiter_standin.build(recorder), ADAPTER):
            from sglang.platforms.kernels.aiter.moe import moe_experts

            ops.moe_experts = moe_experts
            with torch.inference_mode():
                prime_moe_layers(torch.nn.Sequential(layer))
    finally:
        restore(saved)
    assert recorder.names() == ["shuffle_weight", "shuffle_weight", "fused_moe"]
    assert layer.experts.gate_up_proj.is_shuffled and layer.experts.down_proj.is_shuffled
