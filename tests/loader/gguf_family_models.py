"""The tiny random models the GGUF family tests write: which model-parity spec each family uses,
adjusted to what a GGUF can say, and a builder that makes each (transformers model, GGUF) once per
test session."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM

from sglang.ci.suites.model_harness import DEEPSEEK, SPECS_BY_NAME, randomize_

from .gguf_family_synth import write_family_gguf
from .gguf_synth import TOKENS

_GEMMA3_LAYERS = ["sliding_attention"] * 5 + ["full_attention", "sliding_attention"]
_DEEPSEEK_ROPE = {**DEEPSEEK["rope_parameters"], "mscale": DEEPSEEK["rope_parameters"]["mscale_all_dim"]}
"""The file keeps only mscale_all_dim (`yarn_log_multiplier`); llama.cpp takes mscale equal to it."""

FAMILIES: dict[str, tuple[str, str, dict[str, Any]]] = {
    # name: (model-parity spec, GGUF architecture, overrides)
    "mixtral": ("mixtral", "llama", {}),
    "phi3": ("phi3-longrope", "phi3", {}),
    # The converter drops query_pre_attn_scalar; llama.cpp assumes the head dim below 27B sizes.
    "gemma2": ("gemma2-softcap", "gemma2", {"query_pre_attn_scalar": 32}),
    # llama.cpp hard-codes the windowed layers' rotary base (10000) and the window period (6).
    "gemma3": (
        "gemma3-local-rope",
        "gemma3",
        {
            "query_pre_attn_scalar": 32,
            "num_hidden_layers": 7,
            "layer_types": _GEMMA3_LAYERS,
            "final_logit_softcapping": 3.0,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0},
            },
        },
    ),
    "deepseek-v2": ("deepseek-v2-mla", "deepseek2", {"rope_parameters": _DEEPSEEK_ROPE}),
    "deepseek-v3": ("deepseek-v3-mla", "deepseek2", {"rope_parameters": _DEEPSEEK_ROPE}),
    "glm4moe": ("glm4-moe-grouped", "glm4moe", {}),
}

Built = tuple[torch.nn.Module, Path]
_BUILT: dict[str, Built] = {}


def family_builder(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Built]:
    """family -> (the transformers model, its GGUF), each built once per session."""

    def get(name: str) -> Built:
        if name not in _BUILT:
            spec_name, arch, overrides = FAMILIES[name]
            torch.manual_seed(0)
            config = SPECS_BY_NAME[spec_name].hf_config(vocab_size=len(TOKENS), **overrides)
            model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
            randomize_(model.eval(), torch.Generator().manual_seed(0))
            path = tmp_path_factory.mktemp(name) / f"{name}.gguf"
            write_family_gguf(path, arch, model)
            _BUILT[name] = model, path
        return _BUILT[name]

    return get
