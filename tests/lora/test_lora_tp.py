"""LoRA under tensor parallelism for real: an engine of two rank processes over gloo serving the
tiny Llama's adapters gives the same greedy tokens as one rank, for a mixed batch of base and
three adapters through two device slots (so slots are rewritten while it runs) and with one
adapter loaded at run time (its weights broadcast to the follower).

Slow (two engines, three processes). The sharding itself is checked by default, without
processes, in test_lora_sharding.py."""

from __future__ import annotations

import pytest

from sglang.runtime.engine import Engine

pytestmark = pytest.mark.slow

BATCH = (None, "a", "b", "a", "c")
PROMPTS = [[1500 + 7 * i + j for j in range(10 + i)] for i in range(len(BATCH))]
GREEDY = {"temperature": 0.0, "max_new_tokens": 6, "ignore_eos": True}


def greedy_tokens(model, tp_size: int) -> list[list[int]]:
    with Engine(**model.engine_args(("a", "b"), max_total_tokens=2048, tp_size=tp_size)) as engine:
        loaded = engine.load_lora_adapter("c", str(model.adapters["c"]))
        assert loaded["success"], loaded
        outs = engine.generate(input_ids=PROMPTS, sampling_params=GREEDY, lora_path=list(BATCH))
    return [out["output_ids"] for out in outs]


def test_tp2_greedy_tokens_equal_tp1_with_adapters(lora_models) -> None:
    model = lora_models("llama")
    tp1 = greedy_tokens(model, 1)
    assert tp1[0] != tp1[1] or tp1[1] != tp1[2]  # the adapters change the tokens
    assert greedy_tokens(model, 2) == tp1
