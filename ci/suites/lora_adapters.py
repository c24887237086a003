"""Tiny served models with random PEFT LoRA adapters, and PEFT's own outputs as the reference.

A model folder is the schedule fuzzer's kind (a tiny random-weight Hugging Face model with the
embedded model's tokenizer, so a server can load it); adapters are made by PEFT itself
(`LoraConfig(init_lora_weights=False)`: random A and B, so every adapter changes the logits)
and saved as PEFT folders, exactly what a user would point `--lora-paths` at.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from sglang.ci.suites.model_harness import ModelSpec, build_checkpoint
from sglang.runtime.loader import open_model_source

LORA_MODEL_SPECS = {
    "llama": ModelSpec("lora-llama", LlamaConfig, "LlamaForCausalLM", {"vocab_size": 49152}),
    "qwen2": ModelSpec("lora-qwen2", Qwen2Config, "Qwen2ForCausalLM", {"vocab_size": 49152}),
}
"""`TINY` shapes with the embedded tokenizer's vocabulary; Qwen2 adds q/k/v biases."""


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    rank: int
    alpha: int
    targets: tuple[str, ...]


ADAPTERS = (
    AdapterSpec("a", 8, 16, ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")),
    AdapterSpec("b", 4, 8, ("q_proj", "v_proj")),
    AdapterSpec("c", 16, 8, ("o_proj", "up_proj", "down_proj", "k_proj")),
)
"""Ranks 4-16, different targets (a part of a fused q/k/v or gate/up projection alone, too)."""


ADAPTER_NAMES = tuple(spec.name for spec in ADAPTERS)


def build_adapters(model_dir: Path, directory: Path) -> dict[str, Path]:
    """Every adapter of `ADAPTERS` for the model at `model_dir`, by name."""
    return {spec.name: build_adapter(model_dir, spec, directory, seed) for seed, spec in enumerate(ADAPTERS)}


def lora_flags(adapters: dict[str, Path]) -> dict[str, object]:
    """Engine arguments serving `adapters` (`Engine(**lora_flags(...))`)."""
    return {"lora_paths": tuple(f"{name}={path}" for name, path in adapters.items())}


def build_lora_model(kind: str, directory: Path) -> Path:
    """Writes `kind`'s tiny model and the embedded tokenizer into `directory/model`."""
    model_dir = directory / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    build_checkpoint(LORA_MODEL_SPECS[kind], model_dir)
    open_model_source(None).load_tokenizer().save_pretrained(str(model_dir))
    return model_dir


def build_adapter(model_dir: Path, spec: AdapterSpec, directory: Path, seed: int) -> Path:
    """A random PEFT adapter of `spec` for the model at `model_dir`, saved in `directory/name`."""
    from peft import LoraConfig, get_peft_model  # the test extra's; imported only to make adapters

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=spec.rank, lora_alpha=spec.alpha, target_modules=list(spec.targets), init_lora_weights=False)
    peft_model = get_peft_model(base, config)
    with torch.no_grad():  # PEFT's random B is small; make each adapter move the logits clearly
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.mul_(4.0)
    out = directory / spec.name
    peft_model.save_pretrained(out)
    return out


def peft_reference(model_dir: Path, adapter_dir: Path | None) -> torch.nn.Module:
    """The model PEFT serves for `adapter_dir` (the plain transformers model for None)."""
    from peft import PeftModel

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    return base if adapter_dir is None else PeftModel.from_pretrained(base, adapter_dir).eval()


@torch.no_grad()
def reference_log_probs(model: torch.nn.Module, prompt: list[int], output: list[int]) -> torch.Tensor:
    """`[len(output), V]` float32 log-probabilities the model gives each output position."""
    ids = torch.tensor([prompt + output])
    logits = model(ids).logits[0, len(prompt) - 1 : len(prompt) + len(output) - 1].float()
    return logits.log_softmax(-1)
