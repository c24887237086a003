"""`Engine.load_lora_adapter` and `unload_lora_adapter` change which adapters the engine's requests
may name, as the HTTP routes do (an adapter loaded at run time once stayed unknown to the engine's
request checks: "LoRA adapter 'c' is not loaded")."""

from __future__ import annotations

import pytest

from sglang.runtime.engine import Engine
from sglang.runtime.requests.generate_input import InvalidRequestError

GREEDY = {"temperature": 0.0, "max_new_tokens": 4, "ignore_eos": True}
PROMPT = [1500 + j for j in range(12)]


def test_adapters_loaded_and_unloaded_at_run_time(lora_models) -> None:
    model = lora_models("llama")
    with Engine(**model.engine_args(("a",), max_total_tokens=1024)) as engine:
        with pytest.raises(InvalidRequestError, match="'c' is not loaded"):
            engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="c")
        loaded = engine.load_lora_adapter("c", str(model.adapters["c"]))
        assert loaded["success"] and "c" in loaded["loaded_adapters"], loaded
        with_c = engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="c")["output_ids"]
        base = engine.generate(input_ids=PROMPT, sampling_params=GREEDY)["output_ids"]
        assert len(with_c) == 4 and with_c != base  # the adapter served the request
        assert engine.unload_lora_adapter("c")["success"]
        with pytest.raises(InvalidRequestError, match="'c' is not loaded"):
            engine.generate(input_ids=PROMPT, sampling_params=GREEDY, lora_path="c")
