"""gpt-oss: GQA attention with per-head sinks, QKV and output biases, alternating sliding-window
and global layers (`layer_types`), and experts on every layer with a biased router, biased
experts and the clamped SwiGLU (`swigluoai`); yarn rotary.

The config says the rest (window, yarn, experts); the model declares the output bias and
rewrites the checkpoint's stacked experts into the per-expert tensors the loader fills.
transformers stores them `[E, H, 2I]` with gate and up interleaved (`gate_up_proj[..., ::2]` is
the gate) and the down projection `[E, I, H]`, the transposes of our layout. MXFP4 checkpoints
are refused when the config is read (`ModelConfig.from_dict`); a GGUF's MXFP4 experts arrive
dequantized, one tensor per expert (`runtime/loader/gguf_tensors.py`), and pass through unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.traits import DecoderTraits

_STACKED = re.compile(r"^(?P<experts>.*\.mlp\.experts)\.(?P<kind>gate_up_proj|down_proj)(?P<bias>_bias)?$")


def per_expert_tensors(weights: Iterable[tuple[str, torch.Tensor]]) -> Iterator[tuple[str, torch.Tensor]]:
    """gpt-oss's stacked expert tensors as per-expert `gate_proj`/`up_proj`/`down_proj` weights
    (`[out, in]`) and biases; every other tensor unchanged."""
    for name, tensor in weights:
        match = _STACKED.match(name)
        if match is None:
            yield name, tensor
            continue
        prefix, kind = match["experts"], "bias" if match["bias"] else "weight"
        for expert, stacked in enumerate(tensor):
            if match["kind"] == "down_proj":
                yield f"{prefix}.{expert}.down_proj.{kind}", stacked if match["bias"] else stacked.T
                continue
            gate, up = stacked[..., ::2], stacked[..., 1::2]
            if not match["bias"]:
                gate, up = gate.T, up.T
            yield f"{prefix}.{expert}.gate_proj.{kind}", gate
            yield f"{prefix}.{expert}.up_proj.{kind}", up


class GptOssForCausalLM(DecoderForCausalLM):
    traits = DecoderTraits(output_bias=True)
    checkpoint_renames = {".mlp.router.": ".mlp.gate."}

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        super().load_weights(per_expert_tensors(weights))
