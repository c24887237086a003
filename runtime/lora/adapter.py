"""A LoRA adapter read from a PEFT folder (`adapter_config.json` + `adapter_model.safetensors`).

Reading validates everything before anything reaches the device: the folder is a PEFT LoRA
adapter, its features are ones this server computes exactly (no DoRA, no bias, no per-module
ranks, no extra trained modules), its rank fits `--max-lora-rank`, and it targets only modules
the served model has LoRA slots for. A failure raises `LoraError` with the reason, so a load
either succeeds whole or leaves nothing behind.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""Checkpoint projections a LoRA may target (upstream's names); `qkv_proj`, `gate_up_proj` and
`all` name groups of them."""
GROUPS = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj"), "all": PROJECTIONS}


class LoraError(ValueError):
    """An adapter cannot be loaded (or named) as asked; the message says why (HTTP 400)."""


def expand_targets(names: list[str] | tuple[str, ...]) -> frozenset[str]:
    """Projection names from upstream's target-module names (groups expanded)."""
    out: set[str] = set()
    for name in names:
        if name in GROUPS:
            out.update(GROUPS[name])
        elif name in PROJECTIONS:
            out.add(name)
        else:
            supported = ", ".join((*PROJECTIONS, *GROUPS))
            raise LoraError(f"LoRA target module {name!r} is not supported (supported: {supported})")
    return frozenset(out)


@dataclass(frozen=True)
class LoraAdapter:
    """One adapter on the host. `weights` maps a checkpoint projection path (`model.layers.0.
    self_attn.q_proj`) to `(A [r, in], B [out, r])`."""

    name: str
    path: str
    rank: int
    scaling: float
    target_modules: frozenset[str]
    weights: dict[str, tuple[torch.Tensor, torch.Tensor]]


def _config(folder: Path) -> dict:
    if not folder.is_dir():
        raise LoraError(f"LoRA path {str(folder)!r} is not a folder on this machine")
    config_path = folder / CONFIG_FILE
    if not config_path.is_file():
        raise LoraError(f"{str(folder)!r} is not a PEFT adapter: it has no {CONFIG_FILE}")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as e:
        raise LoraError(f"{config_path}: not readable JSON: {e}") from None
    if not isinstance(config, dict) or str(config.get("peft_type", "LORA")).upper() != "LORA":
        raise LoraError(f"{config_path}: not a LoRA adapter (peft_type {config.get('peft_type')!r})")
    unsupported = {
        "use_dora": "DoRA",
        "rank_pattern": "per-module ranks (rank_pattern)",
        "alpha_pattern": "per-module alphas (alpha_pattern)",
        "modules_to_save": "extra trained modules (modules_to_save)",
        "layers_to_transform": "a subset of layers (layers_to_transform)",
        "layer_replication": "layer replication",
        "lora_bias": "LoRA biases (lora_bias)",
        "trainable_token_indices": "trained token embeddings (trainable_token_indices)",
        "target_parameters": "LoRA on parameters (target_parameters)",
        "alora_invocation_tokens": "activated LoRA (alora_invocation_tokens)",
    }
    for key, feature in unsupported.items():
        if config.get(key):
            raise LoraError(f"{config_path}: {feature} is not supported")
    if config.get("bias", "none") != "none":
        raise LoraError(f"{config_path}: LoRA biases (bias={config['bias']!r}) are not supported")
    return config


def _targets(config: dict, config_path: Path) -> frozenset[str]:
    targets = config.get("target_modules")
    if isinstance(targets, str):
        # PEFT allows a regex; only the plain projection names this server knows are accepted.
        targets = [targets]
    if not isinstance(targets, list) or not targets:
        raise LoraError(f"{config_path}: target_modules must be a list of module names")
    try:
        return expand_targets(targets)
    except LoraError as e:
        raise LoraError(f"{config_path}: {e}") from None


def read_adapter(name: str, path: str, max_rank: int | None, served_targets: frozenset[str] | None) -> LoraAdapter:
    """The adapter at `path`, validated; `served_targets` None accepts any supported module."""
    folder = Path(path)
    config = _config(folder)
    config_path = folder / CONFIG_FILE
    rank = config.get("r")
    if not isinstance(rank, int) or rank < 1:
        raise LoraError(f"{config_path}: r must be a positive integer, got {rank!r}")
    if max_rank is not None and rank > max_rank:
        raise LoraError(f"adapter {name!r} has rank {rank}, over --max-lora-rank {max_rank}")
    targets = _targets(config, config_path)
    if served_targets is not None and not targets <= served_targets:
        missing = ", ".join(sorted(targets - served_targets))
        raise LoraError(
            f"adapter {name!r} targets {missing}, which the server has no LoRA slots for "
            f"(--lora-target-modules: {', '.join(sorted(served_targets))})"
        )
    alpha = config.get("lora_alpha", rank)
    scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
    weights_path = folder / WEIGHTS_FILE
    if not weights_path.is_file():
        raise LoraError(f"{str(folder)!r} is not a PEFT adapter: it has no {WEIGHTS_FILE}")
    try:
        tensors = load_file(str(weights_path))
    except (OSError, SafetensorError) as e:
        raise LoraError(f"{weights_path}: unreadable safetensors: {e}") from None
    return LoraAdapter(name, str(folder), rank, float(scaling), targets, _pairs(tensors, rank, weights_path))


def _pairs(tensors: dict[str, torch.Tensor], rank: int, source: Path) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """`{projection path: (A, B)}` from PEFT's `...q_proj.lora_A.weight` / `lora_B.weight` keys."""
    halves: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        stem, dot, kind = key.removesuffix(".weight").rpartition(".")
        if not dot or kind not in ("lora_A", "lora_B"):
            raise LoraError(f"{source}: unexpected tensor {key!r} (only lora_A/lora_B weights are supported)")
        halves.setdefault(stem.removeprefix(PEFT_PREFIX), {})[kind] = tensor
    pairs = {}
    for module, half in halves.items():
        if set(half) != {"lora_A", "lora_B"}:
            raise LoraError(f"{source}: {module} has lora_A or lora_B but not both")
        a, b = half["lora_A"], half["lora_B"]
        if a.dim() != 2 or b.dim() != 2 or a.shape[0] != rank or b.shape[1] != rank:
            raise LoraError(f"{source}: {module} has A {tuple(a.shape)} and B {tuple(b.shape)}, not rank {rank}")
        pairs[module] = (a, b)
    if not pairs:
        raise LoraError(f"{source}: no LoRA weights")
    return pairs
