"""Tiny random models for the tpu tests, from the model parity suite's specs (every supported
architecture), and a driver that feeds them through a `ModelRunner` step by step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from sglang.ci.suites.model_harness import MODEL_SPECS, SPECS_BY_NAME, Checkpoint, build_checkpoint
from sglang.ops.attention import AttentionInputs
from sglang.ops.step import StepInputs
from sglang.platforms.base import ModelFacts, Platform
from sglang.runtime.execution.model_runner import ModelRunner, attention_backend_for
from sglang.runtime.models.registry import model_class_for

SPEC_NAMES = tuple(spec.name for spec in MODEL_SPECS)


def checkpoint(name: str, root: Path) -> Checkpoint:
    directory = root / name
    directory.mkdir(parents=True, exist_ok=True)
    return build_checkpoint(SPECS_BY_NAME[name], directory)


def runner_for(
    ckpt: Checkpoint, platform: Platform, num_slots: int = 128, dtype=torch.float32, force_reference: bool = False
) -> ModelRunner:
    config = ckpt.config
    facts = ModelFacts(
        dtype=dtype,
        head_dim=config.attention_head_dim,
        num_heads=config.num_heads,
        num_kv_heads=config.attention_kv_heads,
        features=config.op_features,
    )
    platform.bind_ops(facts, force_reference=force_reference)
    model = model_class_for(config)(config, dtype)
    model.load_weights(ckpt.weights.items())
    model.eval()
    return ModelRunner(model, platform, num_slots, attention_backend_for(model, platform))


class Feeder:
    """Feeds prompts' tokens in steps of (sequence, start, end) chunks, each sequence's KV in
    shuffled slots (never slot 0, the padding slot); returns every fed token's logits."""

    def __init__(self, runner: ModelRunner, prompts: Sequence[torch.Tensor], seed: int = 3) -> None:
        self.runner, self.prompts = runner, prompts
        self.free = (torch.randperm(runner.num_slots - 1, generator=torch.Generator().manual_seed(seed)) + 1).tolist()
        self.slots: dict[int, list[int]] = {}

    def step(
        self, chunks: Sequence[tuple[int, int, int]], lora_slots: Sequence[int] | None = None
    ) -> list[torch.Tensor]:
        """`lora_slots`: each chunk's LoRA slot (None: LoRA off for the step)."""
        seq_lens, extend_lens, kv_slots, ids, positions = [], [], [], [], []
        for seq, start, end in chunks:
            slots = self.slots.setdefault(seq, [])
            slots.extend(self.free.pop() for _ in range(end - start))
            seq_lens.append(end)
            extend_lens.append(end - start)
            kv_slots.extend(slots)
            ids.append(self.prompts[seq][start:end])
            positions.append(torch.arange(start, end))
        tokens = sum(extend_lens)
        step = StepInputs(
            input_ids=torch.cat(ids),
            positions=torch.cat(positions),
            attention=AttentionInputs(tuple(seq_lens), tuple(extend_lens), torch.tensor(kv_slots)),
            logit_rows=torch.arange(tokens),
            lora_slots=None
            if lora_slots is None
            else torch.tensor(lora_slots).repeat_interleave(torch.tensor(extend_lens)),
        )
        return list(self.runner.forward(step).split(extend_lens))
