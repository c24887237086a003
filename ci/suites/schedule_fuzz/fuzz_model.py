"""The models the schedule fuzzer serves: tiny random-weight models with a real tokenizer.

Stop strings and JSON-schema constraints act on text, so every model carries the embedded model's
tokenizer (SmolLM2's byte-level BPE) and a vocabulary of the same size; everything else is a
model-parity spec (`model_harness.SPECS_BY_NAME`, its `TINY` shape), so the Triton interpreter and
XLA:CPU stay fast. The context is long enough for the ~420-token regression prompt plus its
outputs. Besides the Llama, one model per attention and layer kind issue 30 added: DeepSeek V2
(multi-head latent attention, routed experts with a shared one) and gpt-oss (sliding windows
shorter than the fuzzer's prompts, attention sinks, biased experts).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglang.ci.suites.model_harness import SPECS_BY_NAME, ModelSpec, build_checkpoint
from sglang.runtime.loader import open_model_source

FUZZ_SHAPE: dict[str, Any] = {"vocab_size": 49152, "max_position_embeddings": 1024}
"""What every fuzz model changes on its parity spec: the embedded tokenizer's vocabulary and a
1024-token context."""

FIRST_PLAIN_TOKEN = 17
"""SmolLM2's ids below this are special tokens (end of text, chat markers); prompts avoid them."""


def fuzz_variant(parity_spec: str, **overrides: Any) -> ModelSpec:
    """The model-parity spec `parity_spec` with `FUZZ_SHAPE` and `overrides` on top."""
    spec = SPECS_BY_NAME[parity_spec]
    return replace(spec, name=f"fuzz-{parity_spec}", overrides={**spec.overrides, **FUZZ_SHAPE, **overrides})


@dataclass(frozen=True)
class FuzzModel:
    """A model the fuzzer serves. Invariant: `attention_op` is the op its attention layers bind
    (a target checks which family that op came from after the engine starts)."""

    name: str
    spec: ModelSpec
    attention_op: str = "attention_backend"


GPT_OSS_WINDOW = 24
"""gpt-oss's sliding window in the fuzzer: shorter than most drawn prompts (up to 600 tokens, or
40 in Triton's interpreter) and than a prefill chunk (128), across page boundaries (16)."""

LLAMA = FuzzModel("llama", fuzz_variant("llama"))
FUZZ_MODELS: dict[str, FuzzModel] = {
    model.name: model
    for model in (
        LLAMA,
        FuzzModel("deepseek-v2", fuzz_variant("deepseek-v2-mla"), attention_op="mla_backend"),
        FuzzModel("gpt-oss", fuzz_variant("gpt-oss-sinks", sliding_window=GPT_OSS_WINDOW)),
    )
}
FUZZ_SPEC = LLAMA.spec
"""The Llama's spec (the fuzzer's first model; the tpu KV copy tests serve it too)."""


def build_fuzz_model(directory: Path, spec: ModelSpec = FUZZ_SPEC) -> Path:
    """Writes `spec`'s model (weights seeded, so every run serves the same one) and the embedded
    model's tokenizer into `directory`; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = build_checkpoint(spec, directory)
    tokenizer = open_model_source(None).load_tokenizer()
    assert len(tokenizer) <= checkpoint.config.vocab_size, "every token id the tokenizer makes must be a model row"
    tokenizer.save_pretrained(str(directory))
    return directory
