"""Step tapes (cpu_cpp): a recorded step replays the same kernel calls over what its recorded tensors
hold at replay time, and a step a tape cannot replay is refused with the reason.

The real model's captured decode through tapes is tests/runtime/test_cpu_captured_decode.py;
here small steps pin the recorder's rules: views are not replayed but still see new values, the
few torch ops a step may make beside the kernels replay too, and an unknown op, a value read into
Python or a KV buffer replaced instead of updated make the step untapeable.
"""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from sglang.platforms.cpu.runtime import TapedDecodeRuntime
from sglang.platforms.device_runtime import BucketStep
from sglang.platforms.kernels.cpu_cpp import elementwise
from sglang.platforms.kernels.cpu_cpp.build import build_failure
from sglang.platforms.kernels.cpu_cpp.step_tape import TapedStep, Untapeable, record_tape
from sglang.platforms.kernels.cpu_cpp.tape_arena import TapeArena, storage_key

pytestmark = pytest.mark.skipif(build_failure() is not None, reason="the cpu_cpp kernels did not build")

ROWS, WIDTH = 3, 64


class StaticInputs:
    """What a bucket's step reads besides its KV buffers: rewritten in place between replays."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.hidden = torch.randn(ROWS, WIDTH, generator=generator)
        self.weight = torch.rand(WIDTH, generator=generator) + 0.5
        self.ids = torch.tensor([0, 2, 1])
        self.table = torch.randint(-100, 100, (4, WIDTH // 2), dtype=torch.int8, generator=generator)
        self.dense = torch.randn(WIDTH // 2, WIDTH // 2, generator=generator)
        self.bias = torch.randn(WIDTH // 2, generator=generator)

    def refill(self, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.hidden.copy_(torch.randn(ROWS, WIDTH, generator=generator))
        self.ids.copy_(torch.randint(0, 4, (ROWS,), generator=generator))


def kernel_step(inputs: StaticInputs) -> BucketStep:
    """Kernels, views of their outputs, the torch ops of an int8 embedding's dequantization and a
    dense layer's embedding and linear."""

    def step(kv_buffers: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        normed = elementwise.rms_norm(inputs.hidden.view(ROWS, 1, WIDTH), inputs.weight, 1e-6).flatten(0, 1)
        gated = elementwise.silu_and_mul(normed)
        rows = inputs.table.index_select(0, inputs.ids).to(torch.float32)
        mixed, residual = elementwise.fused_add_rms_norm(gated.mul(rows), gated, inputs.weight[: WIDTH // 2], 1e-6)
        kv_buffers[0].copy_(residual[:, :4].unsqueeze(0))
        dense = F.linear(mixed, inputs.dense, inputs.bias) + F.embedding(inputs.ids, inputs.dense)
        return dense.add(residual), kv_buffers

    return step


def test_a_replay_reads_what_its_inputs_hold_now() -> None:
    inputs, kv = StaticInputs(), [torch.zeros(1, ROWS, 4)]
    step = kernel_step(inputs)
    taped = record_tape(step, kv)
    assert isinstance(taped, TapedStep) and len(taped.tape) == 11  # views and the unsqueeze are not calls
    for seed in (1, 2, 3):
        inputs.refill(seed)
        logits, written = taped(kv)
        replayed, stored = logits.clone(), written[0].clone()
        expected, eager_kv = step([torch.zeros(1, ROWS, 4)])
        assert torch.equal(replayed, expected)
        assert torch.equal(stored, eager_kv[0])
        assert written[0] is kv[0]


def test_a_replay_over_other_kv_buffers_is_refused() -> None:
    inputs, kv = StaticInputs(), [torch.zeros(1, ROWS, 4)]
    taped = record_tape(kernel_step(inputs), kv)
    with pytest.raises(RuntimeError, match="KV buffers it was recorded with"):
        taped([torch.zeros(1, ROWS, 4)])


@pytest.mark.parametrize(
    ("make_step", "reason"),
    [
        # an op the tape has no call for
        (lambda x: lambda kv: (elementwise.silu_and_mul(x.cumsum(0)), kv), "aten.cumsum"),
        # a value read into Python would be frozen into every replay
        (lambda x: lambda kv: (elementwise.silu_and_mul(x[: 1 + (x[0, 0].item() > 0)]), kv), "_local_scalar_dense"),
        # an out-of-place KV update: a replay would not write the pool the scheduler reads
        (lambda x: lambda kv: (elementwise.silu_and_mul(x), [kv[0] + 1]), "in place"),
        (lambda x: lambda kv: (x.sum(-1), kv), "calls no sglang_cpu_cpp kernels"),
    ],
    ids=["other-op", "value-read", "new-kv-buffer", "no-kernels"],
)
def test_untapeable_steps_say_why(make_step, reason: str) -> None:
    x = torch.randn(4, 4)
    with pytest.raises(Untapeable, match=reason):
        record_tape(make_step(x), [torch.zeros(2)])


def test_the_runtime_traces_a_step_a_tape_cannot_replay(caplog) -> None:
    x = torch.randn(4, 4)

    def step(kv: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return elementwise.silu_and_mul(x.cumsum(0)), kv

    with caplog.at_level(logging.INFO, logger="sglang.platforms.cpu.runtime"):
        captured = TapedDecodeRuntime().capture_step(step, [torch.zeros(2)])
    assert not isinstance(captured, TapedStep)
    assert "decode steps are traced, not taped: no tape call for aten.cumsum" in caplog.text
    x.copy_(torch.randn(4, 4))
    assert torch.equal(captured([torch.zeros(2)])[0], step([])[0])


def test_tapes_sharing_an_arena_replay_as_the_eager_step_in_any_order() -> None:
    """Two buckets' tapes over one arena: each replay recomputes every intermediate it reads, so
    interleaved replays still give the eager step's outputs, and the arena holds one step's live
    buffers, not every buffer of both."""
    arena = TapeArena()
    buckets = [(StaticInputs(), [torch.zeros(1, ROWS, 4)]) for _ in range(2)]
    tapes = [record_tape(kernel_step(inputs), kv, arena) for inputs, kv in buckets]
    for seed in (4, 5, 6):
        for index in (1, 0, 1):
            inputs, kv = buckets[index]
            inputs.refill(seed + index)
            logits, _ = tapes[index](kv)
            expected, _ = kernel_step(inputs)([torch.zeros(1, ROWS, 4)])
            assert torch.equal(logits, expected)
    # a step's logits are read after its replay, whatever replays next: they are not in the arena
    first, _ = tapes[0](buckets[0][1])
    expected, _ = kernel_step(buckets[0][0])([torch.zeros(1, ROWS, 4)])
    buckets[1][0].refill(9)
    tapes[1](buckets[1][1])
    assert torch.equal(first, expected)
    # every buffer the step allocates, each rounded up to a cache line: normed, gated, the int8
    # rows and their floats, their product, mixed, residual, and the linear's and embedding's
    allocated = 64 * sum(-(-n // 64) for n in (768, 384, 96, 384, 384, 384, 384, 384, 384))
    assert 0 < arena.storage.nbytes() < allocated


def test_placement_reuses_the_bytes_of_dead_buffers() -> None:
    """Three 1 KiB buffers, the first dead when the third is written: two slots suffice."""
    arena = TapeArena()
    a, b, c = (torch.empty(256) for _ in range(3))
    keys = {storage_key(t) for t in (a, b, c)}
    offsets = arena.place([(a,), (a, b), (b, c), (c,)], keys)
    assert offsets[storage_key(c)] == offsets[storage_key(a)] != offsets[storage_key(b)]
    assert arena.storage.nbytes() == 2048
