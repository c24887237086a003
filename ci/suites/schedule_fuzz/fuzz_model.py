"""The model the schedule fuzzer serves: a tiny random-weight Llama with a real tokenizer.

Stop strings and JSON-schema constraints act on text, so the model carries the embedded model's
tokenizer (SmolLM2's byte-level BPE) and a vocabulary of the same size; everything else is the
model-parity suite's `TINY` shape, so the Triton interpreter and XLA:CPU stay fast. The context
is long enough for the ~420-token regression prompt plus its outputs.
"""

from __future__ import annotations

from pathlib import Path

from transformers import LlamaConfig

from sglang.ci.suites.model_harness import ModelSpec, build_checkpoint
from sglang.runtime.loader import open_model_source

FUZZ_SPEC = ModelSpec(
    "fuzz-llama",
    LlamaConfig,
    "LlamaForCausalLM",
    {"vocab_size": 49152, "max_position_embeddings": 1024},
    note="TINY Llama with the embedded tokenizer's vocabulary (49152) and a 1024-token context",
)

FIRST_PLAIN_TOKEN = 17
"""SmolLM2's ids below this are special tokens (end of text, chat markers); prompts avoid them."""


def build_fuzz_model(directory: Path) -> Path:
    """Writes the model (weights seeded, so every run serves the same one) and the embedded
    model's tokenizer into `directory`; returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    checkpoint = build_checkpoint(FUZZ_SPEC, directory)
    tokenizer = open_model_source(None).load_tokenizer()
    assert len(tokenizer) <= checkpoint.config.vocab_size, "every token id the tokenizer makes must be a model row"
    tokenizer.save_pretrained(str(directory))
    return directory
