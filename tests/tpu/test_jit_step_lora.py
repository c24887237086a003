"""LoRA through the tpu platform's jitted steps on XLA:CPU: adapter slots are step arguments, so
an adapter written into a slot after the step was compiled takes effect at once, clearing it
restores the base model's logits, and neither compiles anything again.

The slow PEFT parity (tests/lora/test_lora_parity.py, the `-tpu` cases) runs a whole server; this
drives the runner directly, with the manager's own slot commands (`LoraReplica`)."""

from __future__ import annotations

import pytest
import torch

from sglang.ci.suites.model_harness import FP32_ATOL
from sglang.platforms import select_platform
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.lora.adapter import PROJECTIONS, LoraAdapter
from sglang.runtime.lora.layers import LoraState
from sglang.runtime.lora.replica import AttachLora, LoadLora, LoraReplica, WriteLoraSlot

from .tiny_models import Feeder, checkpoint, runner_for

RANK = 4
PROMPT_TOKENS = 8


def random_adapter(state: LoraState, seed: int) -> LoraAdapter:
    """An adapter of rank `RANK` on every projection, weights large enough to move the logits."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, (layer, part) in state.layers.items():
        a = torch.randn(RANK, layer.in_split.size, generator=gen) * 0.2
        b = torch.randn(layer.out_widths[part], RANK, generator=gen) * 0.2
        weights[name] = (a, b)
    return LoraAdapter(f"random-{seed}", "", RANK, 2.0, frozenset(PROJECTIONS), weights)


class Slots:
    """A runner's model with LoRA layers of two adapter slots, filled by the manager's commands."""

    def __init__(self, runner: ModelRunner) -> None:
        self.replica = LoraReplica(runner.model)
        self.replica.apply(AttachLora(3, RANK, frozenset(PROJECTIONS)))

    def write(self, slot: int, adapter: LoraAdapter | None) -> None:
        """Fills `slot` with `adapter` (loaded first), or clears it with None."""
        uid = None
        if adapter is not None:
            uid = len(self.replica.adapters) + 1
            self.replica.apply(LoadLora(uid, adapter))
        self.replica.apply(WriteLoraSlot(slot, uid))


def prefill(feeder: Feeder, step: int, lora_slots: list[int] | None) -> list[torch.Tensor]:
    """Both prompts' logits, as new sequences (no KV shared with earlier steps)."""
    return feeder.step([(2 * step, 0, PROMPT_TOKENS), (2 * step + 1, 0, PROMPT_TOKENS)], lora_slots)


def test_slot_writes_after_compiling_take_effect_without_recompiling(tmp_path, xla_cpu: None) -> None:
    ckpt = checkpoint("llama", tmp_path)
    runner = runner_for(ckpt, select_platform("tpu"), num_slots=256)
    slots = Slots(runner)
    gen = torch.Generator().manual_seed(5)
    prompts = [torch.randint(0, ckpt.config.vocab_size, (PROMPT_TOKENS,), generator=gen)] * 2
    feeder = Feeder(runner, prompts * 4)

    # Row 0 reads slot 1, row 1 the base model's slot 0. Compiled once, while slot 1 is empty.
    empty = prefill(feeder, 0, [1, 0])
    adapter_a, adapter_b = random_adapter(slots.replica.attached(), 1), random_adapter(slots.replica.attached(), 2)
    slots.write(1, adapter_a)
    with_a = prefill(feeder, 1, [1, 0])
    slots.write(1, adapter_b)
    with_b = prefill(feeder, 2, [1, 0])
    slots.write(1, None)
    cleared = prefill(feeder, 3, [1, 0])

    torch.testing.assert_close(cleared, empty, atol=FP32_ATOL, rtol=0)
    torch.testing.assert_close(empty[0], empty[1], atol=FP32_ATOL, rtol=0)  # same prompt: an empty slot is the base
    for logits in (with_a, with_b):
        torch.testing.assert_close(logits[1], empty[1], atol=FP32_ATOL, rtol=0)
    assert (with_a[0] - empty[0]).abs().max() > 0.1, "the adapter written after compiling changed nothing"
    assert (with_b[0] - with_a[0]).abs().max() > 0.1, "the slot still computes the adapter it held before"
    shapes = [str(r.shape) for r in runner.step_runner.records]
    assert len(shapes) == 1 and shapes[0].endswith(" lora"), f"compiled: {shapes}"

    # Both rows as the cpu platform computes them (reference ops), the adapter from another slot.
    cpu = runner_for(ckpt, select_platform("cpu"), num_slots=64, force_reference=True)
    Slots(cpu).write(2, adapter_a)
    expected = Feeder(cpu, prompts).step([(0, 0, PROMPT_TOKENS), (1, 0, PROMPT_TOKENS)], [2, 0])
    torch.testing.assert_close(with_a, expected, atol=FP32_ATOL * 10, rtol=0)


@pytest.mark.slow
def test_layers_attached_after_a_step_are_traced_in(tmp_path, xla_cpu: None) -> None:
    """The server attaches LoRA layers after building its runner. Had the runner compiled a step
    before, it drops it (the module tree changed) and traces the step again with the layers."""
    ckpt = checkpoint("llama", tmp_path)
    runner = runner_for(ckpt, select_platform("tpu"), num_slots=64)
    feeder = Feeder(runner, [torch.arange(1, PROMPT_TOKENS + 1)] * 4)
    before = prefill(feeder, 0, None)
    slots = Slots(runner)
    slots.write(1, random_adapter(slots.replica.attached(), 1))
    after = prefill(feeder, 1, None)
    torch.testing.assert_close(after, before, atol=FP32_ATOL, rtol=0)
    assert [r.shape.lora for r in runner.step_runner.records] == [False, False]
