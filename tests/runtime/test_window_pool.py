"""The window pool: windowed layers keep only their window (issue 30, item 3).

Cheap by default: the pool's invariants (allocation all or nothing, freeing with the full slot,
the slot list windowed layers read, which cached prefixes stay usable, adoption of a page the
radix cache swapped), the startup refusals and their reasons, and one tiny random gpt-oss decoder
(window 4: a windowed layer with sinks and a global one) served by the scheduler with and without
a window pool of 24 window slots, eagerly, captured and with NGRAM, through chunked prefill
(chunks of 8), shared prefixes found in the radix cache, retractions and decodes past the window:
greedy tokens are identical, no query reads the padding slot inside its window, the window pool
never holds more than its 24 slots, and it is whole again once the cache is flushed. About 2.5 s
(0.7-0.8 s per served variant, load 6)."""

from __future__ import annotations

import logging

import pytest
import torch

from sglang.ci.suites.model_harness import TargetSpec, bound_ops
from sglang.ops.attention import ReferenceAttention
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import PADDING_SLOT, StepInputs
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.execution.window_layers import WindowLayout, window_pool_refusal
from sglang.runtime.memory.token_allocator import PagedTokenAllocator
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.scheduler.scheduler import Scheduler
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads
from tests.runtime.test_cpu_captured_layer_kinds import GPT_OSS, _random_model

WINDOW = 4
FULL_TOKENS = 160
WINDOW_TOKENS = 24
PROMPT = [5, 9, 13, 2, 7, 30, 31, 3, 3, 8, 60, 1, 11, 40, 8, 1, 60, 33, 2]
FIRST_WAVE = [PROMPT, [*PROMPT[:13], 4, 4, 4, 4, 4, 4], PROMPT[:12]]


def test_allocation_maps_full_slots_and_frees_with_them() -> None:
    pool = WindowPool(num_full_slots=32, num_window_tokens=4, window=2)
    full = torch.tensor([3, 4, 5])
    assert pool.allocate(full)
    assert (pool.full_to_window[full] > 0).all() and pool.available_tokens() == 1
    assert not pool.allocate(torch.tensor([6, 7]))  # all or nothing
    assert pool.available_tokens() == 1 and (pool.full_to_window[[6, 7]] == -1).all()
    with pytest.raises(ValueError, match="already has a window slot"):
        pool.allocate(torch.tensor([5]))
    # the slot list windowed layers read: the padding slot where a token holds no window slot
    pool.free(torch.tensor([3]))
    assert pool.window_slots(torch.tensor([3, 4, 9])).tolist() == [0, *pool.full_to_window[[4]].tolist(), 0]
    pool.free(torch.tensor([3, 4, 5]))  # slots without a window slot are skipped
    assert pool.allocated_slots().numel() == 0 and (pool.full_to_window == -1).all()


def test_tokens_leave_the_window_as_the_sequence_grows() -> None:
    pool = WindowPool(num_full_slots=32, num_window_tokens=16, window=3)
    slots = torch.arange(10, 20)
    assert pool.allocate(slots)
    pool.free_left_window(slots, num_cached=2, step_start=5)  # 10 tokens after a 5-token step
    held = (pool.full_to_window[slots] >= 0).tolist()
    # the cache's first two and the last window - 1 stay (a query at position 10 sees 8 and 9);
    # position 2 left the window in an earlier step (when the sequence was 5 long), freed then
    assert held == [True, True, True, False, False, False, False, False, True, True]
    assert not pool.has_room(first_chunk=8, running=1) and pool.has_room(first_chunk=7, running=1)


def test_usable_prefix_needs_the_window_before_its_end() -> None:
    pool = WindowPool(num_full_slots=32, num_window_tokens=16, window=2)
    slots = torch.arange(10, 20)
    assert pool.allocate(slots)
    pool.free(slots[:4])  # positions 0-3 left the window of a request that went on
    assert pool.usable_prefix(slots, page_size=1) == 10
    pool.free(slots[8:9])  # position 8 has none: the longest prefix whose last 2 tokens hold theirs
    assert pool.usable_prefix(slots, page_size=1) == 8
    assert pool.usable_prefix(slots, page_size=4) == 8
    pool.free(slots[6:7])
    assert pool.usable_prefix(slots, page_size=4) == 0  # 8 lacks 6, 4 lacks 2-3
    assert pool.usable_prefix(slots[:1], page_size=1) == 0


def test_adopt_moves_window_slots_to_the_tree_copy() -> None:
    pool = WindowPool(num_full_slots=32, num_window_tokens=8, window=2)
    own, tree = torch.tensor([1, 2, 3]), torch.tensor([1, 12, 13])
    assert pool.allocate(own) and pool.allocate(torch.tensor([13]))
    held = pool.full_to_window[[2, 13]].tolist()
    pool.adopt(own, tree)
    assert pool.full_to_window[[1, 12, 13]].tolist() == [pool.full_to_window[1].item(), held[0], held[1]]
    assert pool.full_to_window[2] == -1 and pool.full_to_window[3] >= 0  # 3 still its own: freed as a duplicate


def test_layout_sizes_and_saves() -> None:
    layout = WindowLayout(windowed=(0, 2), num_layers=4, window=4, bytes_per_layer_token=100)
    assert layout.window_tokens(1000, 0.5, chunk=8) == 500
    assert layout.window_tokens(1000, 0.001, chunk=8) == 8 + 4 + 64  # one request always progresses
    assert layout.pool_bytes(1000, 500) == (2 * 1000 + 2 * 500) * 100
    assert layout.bytes_per_full_token(0.5) == (2 + 2 * 0.5) * 100  # what sizes the pool from free memory
    assert "MiB less" in layout.note(1000, 500, None)


class OneSlotList(ReferenceAttention):
    serves_window_slots = False


@pytest.mark.parametrize(
    ("backend", "changes", "reason"),
    [
        (ReferenceAttention, {}, None),
        (ReferenceAttention, {"disable_hybrid_swa_memory": True}, "--disable-hybrid-swa-memory"),
        (OneSlotList, {}, "OneSlotList reads one slot list for every layer"),
        (ReferenceAttention, {"enable_hierarchical_cache": True}, "hierarchical cache"),
        (ReferenceAttention, {"disaggregation_mode": "decode"}, "disaggregation"),
    ],
)
def test_refusal_says_why_windowed_layers_keep_every_token(
    backend: type[ReferenceAttention], changes: dict[str, object], reason: str | None
) -> None:
    args = ServerArgs(model_path="tiny-gpt-oss", **changes)
    found = window_pool_refusal(args, backend(4, 2, 16, torch.float32, torch.device("cpu")))
    assert found == reason if reason is None else reason in found


def _scheduler(
    model: torch.nn.Module, window_pool: WindowPool | None, captured: bool = False, ngram: bool = False
) -> Scheduler:
    args = ServerArgs(
        model_path="tiny-gpt-oss",
        chunked_prefill_size=8,
        max_total_tokens=FULL_TOKENS,
        schedule_policy="fcfs",
        speculative_algorithm="NGRAM" if ngram else None,
    )
    allocator = PagedTokenAllocator(FULL_TOKENS + 1, 1)
    buckets = BucketPolicy((1, 2, 4)) if captured else None
    runner = ModelRunner(model, CpuPlatform(), allocator.num_slots, graph_buckets=buckets, window_pool=window_pool)
    return Scheduler(runner, allocator, args, lambda ids: "", frozenset(), 128, None)


def _check_window_reads(runner: ModelRunner) -> None:
    """Wraps `runner.forward`: in every step, each sequence's tokens inside some query's window
    (its last `window - 1 + extend` tokens) hold window slots, so no query reads the padding slot
    in place of a key it sees."""
    forward = runner.forward

    def checked(step: StepInputs) -> torch.Tensor:
        inputs = step.attention
        starts = inputs.kv_starts
        for i, extend in enumerate(inputs.extend_lens):
            seen = inputs.window_slots[max(starts[i + 1] - extend - WINDOW + 1, starts[i]) : starts[i + 1]]
            assert (seen != PADDING_SLOT).all(), "a query reads the padding slot inside its window"
        return forward(step)

    runner.forward = checked


def _serve(scheduler: Scheduler) -> tuple[dict[str, list[int]], int]:
    """Greedy tokens per request, and the most window slots held at once. Two waves: the second
    finds the first's prefixes cached, among them one that runs into the first request's output,
    whose tokens left the window as it decoded (the usable prefix stops before them)."""
    outputs: dict[str, list[int]] = {}
    most = 0
    for wave in range(2):
        if wave:
            first = outputs["0-0"]
            prompts = [PROMPT, [*PROMPT, *first[:9], 1, 2], [7, 7, 1, 2, 3, 50, 51, 52, 53, 54, 55]]
        else:
            prompts = FIRST_WAVE
        for i, prompt in enumerate(prompts):
            request = make_request(prompt, rid=f"{wave}-{i}", max_new_tokens=12, ignore_eos=True)
            outputs[request.rid] = []
            scheduler.add_request(request)
        while scheduler.has_work:
            for update in scheduler.step():
                outputs[update.rid].extend(update.new_token_ids)
            if scheduler.window_pool is not None:
                most = max(most, scheduler.window_pool.allocated_slots().numel())
                _assert_window_invariants(scheduler)
    return outputs, most


def _assert_window_invariants(scheduler: Scheduler) -> None:
    pool = scheduler.window_pool
    mapped = pool.full_to_window[pool.full_to_window >= 0]
    assert mapped.sort().values.tolist() == pool.allocated_slots().tolist()  # one full slot each
    held = set(scheduler.allocator.allocated_slots().tolist())
    assert set((pool.full_to_window >= 0).nonzero().flatten().tolist()) <= held  # mapped slots are allocated
    for req in scheduler.running:  # every token a next query may see holds its window slot
        assert (pool.full_to_window[req.slots[-(WINDOW - 1) :]] >= 0).all()
        out_of_window = req.slots[req.num_cached : max(req.kv_len - WINDOW + 1, req.num_cached)]
        assert (pool.full_to_window[out_of_window] < 0).all()


@pytest.mark.parametrize(
    ("captured", "ngram"), [(False, False), (True, False), (True, True)], ids=["eager", "captured", "ngram"]
)
def test_gpt_oss_serves_the_same_tokens_with_a_window_pool(
    captured: bool, ngram: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Against eager steps without a window pool; captured decode buckets read the window slot
    lists from a second set of the backend's static buffers; NGRAM verify steps (extends over
    each request's window, rejected drafts freed with their window slots) run eagerly."""
    config = ModelConfig.from_dict(GPT_OSS)
    assert config.sliding_window_for(0) == WINDOW
    with bound_ops(TargetSpec("cpu")) as target, model_threads():
        target.bind_for(config, torch.float32)
        model = _random_model(config)
        expected, _ = _serve(_scheduler(model, None))
        with caplog.at_level(logging.INFO, logger="sglang.runtime.execution.model_runner"):
            scheduler = _scheduler(model, WindowPool(FULL_TOKENS + 1, WINDOW_TOKENS, WINDOW), captured, ngram)
        _check_window_reads(scheduler.runner)
        assert scheduler.runner.attn_backend.serves_window_slots
        assert "keep only their window: 161 full slots x 1 global layers + 25 window slots" in caplog.text
        assert scheduler.runner.kv_buffers[0].shape[1] == WINDOW_TOKENS + 1
        actual, most = _serve(scheduler)
    assert actual == expected
    assert all(len(tokens) == 12 for tokens in actual.values())
    assert scheduler.stats["cached_tokens"] > 0  # the second wave extended cached prefixes
    assert most <= WINDOW_TOKENS
    stats = scheduler.runner.step_stats
    assert (stats.static_steps > 0) == captured and stats.static_fallbacks == 0
    assert (stats.verify_steps > 0) == ngram
    assert scheduler.flush_cache()
    assert scheduler.window_pool.allocated_slots().numel() == 0
    assert scheduler.allocator.allocated_slots().numel() == 0
