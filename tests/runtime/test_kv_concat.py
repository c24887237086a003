"""Parallel encoding (`join("concate_and_append")`): the KV of a trunk followed by its branches,
built from the branches' cached KV, on the in-process scheduler with the embedded model.

Checked: the concatenation is cached and a later request reuses it; copied keys are the source
keys re-rotated, values are copied bit for bit; one branch is the identity; refusals say why and
change nothing; a key moved by `copy_kv` equals the key computed at the target position; the
pool does not leak.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sglang import ops
from sglang.ops.attention import AttentionInputs
from sglang.ops.rotary import RopeScaling, RotaryTable
from sglang.ops.step import StepInputs
from sglang.runtime.execution.model_runner import ModelRunner, _shift_table
from sglang.runtime.processes.kv_concat_request import ConcatInput
from sglang.runtime.scheduler.kv_concat import concat_cached_branches
from sglang.runtime.scheduler.scheduler import Scheduler

from .runtime_harness import Runtime, corpus_ids, make_request, token_ids_of


def kv_of(scheduler: Scheduler, slots: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(keys, values) `[n, Hk, D]` at `slots`, per layer, as float32 on the host."""
    return [(b[0, slots].float().cpu(), b[1, slots].float().cpu()) for b in scheduler.runner.kv_buffers]


def tolerance(dtype: torch.dtype, deep: bool = False) -> float:
    """Float32 (the cpu default) agrees to ~1e-5; a 16-bit KV cache rounds every stored entry."""
    if dtype == torch.float32:
        return 1e-3 if deep else 1e-4
    return 1e-1 if deep else 5e-2


def cached_slots(scheduler: Scheduler, ids: list[int]) -> torch.Tensor:
    match = scheduler.cache.match_prefix(ids)
    assert match.num_cached == len(ids)
    return match.slots


def assert_pool_whole(scheduler: Scheduler) -> None:
    assert not scheduler.has_work
    assert scheduler.cache.protected_size() == 0, "a lock was left behind"
    assert scheduler.allocator.available_tokens() + scheduler.cache.evictable_size() == scheduler.capacity
    assert scheduler.flush_cache()
    assert scheduler.allocator.available_tokens() == scheduler.capacity


def generate_branches(rt: Runtime, scheduler: Scheduler, prefix: list[int]) -> list[list[int]]:
    """Two greedy branches off `prefix`; each branch's tokens after it (prompt tail + output)."""
    tails = [token_ids_of(rt.tokenizer, " First, the bridges:"), token_ids_of(rt.tokenizer, " Second, the bakery:")]
    requests = [make_request(prefix + t, max_new_tokens=6, ignore_eos=True) for t in tails]
    outcomes = rt.run_on(scheduler, requests)
    return [t + outcomes[r.rid].output_ids for t, r in zip(tails, requests)]


@pytest.fixture
def scheduler(rt: Runtime) -> Scheduler:
    return rt.make_scheduler(max_total_tokens=600)


def test_concatenation_is_cached_reused_and_rerotated(rt: Runtime, scheduler: Scheduler) -> None:
    prefix = corpus_ids(rt.tokenizer, 40)
    b1, b2 = generate_branches(rt, scheduler, prefix)

    # A finished request never computes the KV of the last token it sampled: refused, unchanged.
    free = scheduler.allocator.available_tokens()
    refused = concat_cached_branches(scheduler, prefix, [b1, b2])
    assert not refused.ok and "branch 0 is not fully cached" in refused.reason
    assert scheduler.allocator.available_tokens() == free and scheduler.cache.protected_size() == 0

    # Prefill the missing tokens (what the HTTP front does), then concatenate.
    rt.run_on(scheduler, [make_request(prefix + b, max_new_tokens=0) for b in (b1, b2)])
    free = scheduler.allocator.available_tokens()
    result = concat_cached_branches(scheduler, prefix, [b1, b2])
    sequence = prefix + b1 + b2
    assert result.ok, result.reason
    assert result.input_ids == sequence
    assert result.cached_tokens == len(sequence) and result.copied_tokens == len(b2)
    assert scheduler.allocator.available_tokens() == free - len(b2)
    assert scheduler.cache.protected_size() == 0

    # P + B1 is shared, not copied; B2's keys are its branch keys moved by len(B1) positions.
    slots = cached_slots(scheduler, sequence)
    assert torch.equal(slots[: len(prefix) + len(b1)], cached_slots(scheduler, prefix + b1))
    source = cached_slots(scheduler, prefix + b2)[len(prefix) :]
    delta = torch.full((len(b2),), len(b1), dtype=torch.long)
    cos_sin = scheduler.runner.model.cos_sin.float().cpu()
    for (k_new, v_new), (k_src, v_src) in zip(
        kv_of(scheduler, slots[len(prefix) + len(b1) :]), kv_of(scheduler, source)
    ):
        assert torch.equal(v_new, v_src)
        _, rerotated = ops.apply_rotary(delta, k_src, k_src, cos_sin)
        tol = tolerance(scheduler.runner.model.dtype)
        torch.testing.assert_close(k_new, rerotated, atol=tol, rtol=tol)

    # A later request starting with the concatenation reuses all of it.
    suffix = token_ids_of(rt.tokenizer, " In short,")
    later = rt.run_on(scheduler, [make_request(sequence + suffix, rid="later", max_new_tokens=2)])["later"]
    assert later.meta["cached_tokens"] >= len(sequence) - 1

    # Again: nothing left to copy.
    free = scheduler.allocator.available_tokens()
    again = concat_cached_branches(scheduler, prefix, [b1, b2])
    assert again.ok and again.copied_tokens == 0 and again.cached_tokens == len(sequence)
    assert scheduler.allocator.available_tokens() == free
    assert_pool_whole(scheduler)


def test_one_branch_is_the_identity(rt: Runtime, scheduler: Scheduler) -> None:
    prefix = corpus_ids(rt.tokenizer, 24, offset=5)
    branch = token_ids_of(rt.tokenizer, " First, the bridges:")
    rt.run_on(scheduler, [make_request(prefix + branch, max_new_tokens=1)])  # its prompt is cached
    before = cached_slots(scheduler, prefix + branch).clone()
    keys_before = kv_of(scheduler, before)
    free = scheduler.allocator.available_tokens()
    result = concat_cached_branches(scheduler, prefix, [branch])
    assert result.ok and result.copied_tokens == 0 and result.cached_tokens == len(prefix + branch)
    assert torch.equal(cached_slots(scheduler, prefix + branch), before)
    assert scheduler.allocator.available_tokens() == free
    for (k0, v0), (k1, v1) in zip(keys_before, kv_of(scheduler, before)):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)

    # copy_kv with delta 0 copies bit for bit.
    target = scheduler.allocator.alloc_extend(None, len(before))
    scheduler.runner.copy_kv(before, target, torch.arange(len(before)), 0)
    for (k0, v0), (k1, v1) in zip(keys_before, kv_of(scheduler, target)):
        assert torch.equal(k0, k1) and torch.equal(v0, v1)
    scheduler.free_slots(target)
    assert_pool_whole(scheduler)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [({"page_size": 2}, "needs page_size 1"), ({"disable_radix_cache": True}, "prefix cache is disabled")],
)
def test_refusals_say_why(rt: Runtime, changes: dict[str, Any], reason: str) -> None:
    scheduler = rt.make_scheduler(max_total_tokens=64, **changes)
    result = concat_cached_branches(scheduler, [1, 2, 3], [[4], [5]])
    assert not result.ok and reason in result.reason
    assert result.input_ids == [1, 2, 3, 4, 5] and result.cached_tokens == 0
    assert scheduler.allocator.available_tokens() == scheduler.capacity


def test_a_moved_key_equals_the_key_computed_at_the_target_position(rt: Runtime) -> None:
    """Keys are rotated after projection, so moving a key is exact. Layer 0's keys depend only on
    token and position; deeper layers too here, since a whole sequence shifted by delta attends
    with the same relative positions (up to float error)."""
    base = rt.scheduler.runner
    runner = ModelRunner(base.model, base.platform, num_slots=128)
    ids = torch.tensor(corpus_ids(rt.tokenizer, 20, offset=11))
    n, delta = len(ids), 37

    def forward(first_slot: int, first_position: int) -> torch.Tensor:
        slots = torch.arange(first_slot, first_slot + n)
        attention = AttentionInputs(seq_lens=(n,), extend_lens=(n,), kv_slots=slots)
        positions = torch.arange(first_position, first_position + n)
        runner.forward(StepInputs(ids, positions, attention, torch.tensor([n - 1])))
        return slots

    at_zero, shifted = forward(1, 0), forward(40, delta)
    moved = torch.arange(80, 80 + n)
    runner.copy_kv(at_zero, moved, torch.arange(n), delta)
    for layer, buffer in enumerate(runner.kv_buffers):
        expected_k, expected_v = buffer[0, shifted].float(), buffer[1, shifted].float()
        got_k, got_v = buffer[0, moved].float(), buffer[1, moved].float()
        tol = tolerance(base.model.dtype, deep=layer > 0)
        torch.testing.assert_close(got_k, expected_k, atol=tol, rtol=tol)
        torch.testing.assert_close(got_v, expected_v, atol=tol, rtol=tol)


def test_shift_table_is_exact_for_dynamic_ntk_where_a_plain_rotation_is_not() -> None:
    scaling = RopeScaling(kind="dynamic", factor=4.0, original_max_position=64)
    cos_sin = RotaryTable.build(32, 1024, 10000.0, scaling).cos_sin
    key = torch.randn(6, 2, 32)
    source, delta = torch.arange(100, 106), 300
    at_source = ops.apply_rotary(source, key, key, cos_sin)[1]
    at_target = ops.apply_rotary(source + delta, key, key, cos_sin)[1]
    table = _shift_table(cos_sin, source, source + delta)
    moved = ops.apply_rotary(torch.arange(6), at_source, at_source, table)[1]
    torch.testing.assert_close(moved, at_target, atol=1e-4, rtol=1e-4)
    plain = ops.apply_rotary(torch.full((6,), delta), at_source, at_source, cos_sin)[1]
    assert (plain - at_target).abs().max() > 1e-2  # dynamic NTK's angle is not linear in the position


def test_front_tokenizes_like_the_branches_and_validates(rt: Runtime) -> None:
    encode = rt.tokenizer.encode
    obj = ConcatInput.from_dict(
        {"prefix": "Tips for sleep:\n", "branches": ["1. Go to bed early.\n", "2. No coffee.\n"]}
    )
    prefix, branches, reason = obj.tokenize(encode)
    assert reason is None and prefix == encode("Tips for sleep:\n")
    assert [prefix + b for b in branches] == [encode(obj.prefix + b) for b in obj.branches]
    # A fork point before a word's space: " world" is one token spanning the boundary, refused.
    _, _, reason = ConcatInput.from_dict({"prefix": "Hello ", "branches": ["world", "there"]}).tokenize(encode)
    assert reason is not None and "spans the boundary" in reason
    ids = ConcatInput.from_dict({"prefix": [1, 2], "branches": [[3], [4, 5]]}).tokenize(encode)
    assert ids == ([1, 2], [[3], [4, 5]], None)
    for bad in (
        {"prefix": "a", "branches": []},
        {"prefix": "a", "branches": [[1]]},
        {"prefix": [1], "branches": ["b"]},
        {"prefix": 3, "branches": ["b"]},
        {"prefix": "a", "branches": ["b"], "extra": 1},
        [],
    ):
        with pytest.raises(ValueError):
            ConcatInput.from_dict(bad)


def test_the_scheduler_process_answers_the_control_request(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    """The message path: a `ConcatAndAppend` in a ControlRequest is answered with its
    ConcatResult; a failure inside is a not-ok answer, not a dead scheduler."""
    from sglang.runtime.processes.control import ConcatAndAppend, ConcatResult, ControlReply, ControlRequest
    from sglang.runtime.scheduler import process

    scheduler = rt.make_scheduler(max_total_tokens=64, page_size=2)
    sent: list[ControlReply] = []
    monkeypatch.setattr(process.ipc, "send", lambda _socket, message: sent.append(message))
    message = ConcatAndAppend((1, 2), ((3,),))
    process._handle(scheduler, ControlRequest("a", message), None)

    def explode(*_: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(process.kv_concat, "concat_cached_branches", explode)
    process._handle(scheduler, ControlRequest("b", message), None)
    first, second = sent
    assert first.request_id == "a" and isinstance(first.result, ConcatResult) and not first.result.ok
    assert first.result.input_ids == [1, 2, 3] and "page_size" in first.result.reason
    assert second.request_id == "b" and isinstance(second.result, ConcatResult) and not second.result.ok
    assert second.result.input_ids == [1, 2, 3] and "internal error" in second.result.reason
