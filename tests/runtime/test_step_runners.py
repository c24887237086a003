"""The captured step runner on cpu, against a stand-in runtime whose capture records the step and
replays it by calling it again (a real CUDA graph replays recorded kernels; what the runner owes
both is the same: static buffers refilled in place before each replay).

The attention backend is the flashinfer adapter over the recording flashinfer stand-in (it has
static, capturable decode metadata), on a tiny random-weight Llama-style model.
"""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

from sglang.ops.attention import AttentionInputs, CaptureLimits, ReferenceAttention
from sglang.ops.binding import resolve
from sglang.ops.buckets import BucketPolicy
from sglang.ops.collectives import SingleProcessCommunicator
from sglang.ops.step import StepInputs
from sglang.platforms.cpu.platform import CpuPlatform
from sglang.platforms.cpu.runtime import TracedDecodeRuntime
from sglang.platforms.device_runtime import DeviceRuntime, GraphCapturingRuntime
from sglang.platforms.execution.captured import CapturedStepRunner, pad_decode
from sglang.platforms.execution.eager import EagerStepRunner
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.runtime.distributed.group import TPGroup, using_tp_group
from sglang.runtime.execution.model_runner import ModelRunner
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.server_args import ServerArgs

from ..tiny_decoder import TINY_LLAMA_CONFIG, cpu_platform_with, tiny_llama_decoder
from ..vendors import flashinfer_standin
from ..vendors.standin import Recorder, installed

BUCKETS = BucketPolicy((1, 2, 4, 8))
NUM_SLOTS = 256
SPAN = 40
"""Slots per sequence: sequence `i` owns slots `1 + i * SPAN ...` (slot 0 is the scratch slot)."""


class RecordingRuntime(GraphCapturingRuntime):
    def __init__(self) -> None:
        self.captured: list = []
        self.replays = 0

    def capture_graph(self, fn):
        self.captured.append(fn)
        fn()  # a capture runs the step once, as CUDA graph warm-up does

        def replay():
            self.replays += 1
            return fn()

        return replay


@pytest.fixture
def flashinfer_backend(monkeypatch):
    recorder = Recorder()
    with installed(monkeypatch, flashinfer_standin.build(recorder), "sglang.platforms.kernels.flashinfer"):
        yield resolve("sglang.platforms.kernels.flashinfer.attention:FlashInferAttention"), recorder


def _slots(row: int, length: int) -> torch.Tensor:
    return torch.arange(1 + row * SPAN, 1 + row * SPAN + length)


def _step(tokens: list[list[int]], new: list[int]) -> StepInputs:
    """Each sequence's tokens so far; `new[i]` of them are new in this step."""
    ids = [t for seq, n in zip(tokens, new) for t in seq[len(seq) - n :]]
    positions = [p for seq, n in zip(tokens, new) for p in range(len(seq) - n, len(seq))]
    ends = torch.tensor(new).cumsum(0) - 1
    return StepInputs(
        input_ids=torch.tensor(ids),
        positions=torch.tensor(positions),
        attention=AttentionInputs(
            tuple(len(s) for s in tokens), tuple(new), torch.cat([_slots(i, len(s)) for i, s in enumerate(tokens)])
        ),
        logit_rows=ends,
    )


def _generate(runner: ModelRunner, prompts: list[list[int]], steps: int) -> list[list[int]]:
    tokens = [list(p) for p in prompts]
    logits = runner.forward(_step(tokens, [len(p) for p in prompts]))
    for _ in range(steps):
        assert logits.shape[0] == len(tokens), "padded rows must not reach sampling"
        for seq, token in zip(tokens, logits.argmax(-1).tolist()):  # sampling stays outside the graph
            seq.append(token)
        logits = runner.forward(_step(tokens, [1] * len(tokens)))
    return tokens


def test_same_tokens_with_and_without_capture(flashinfer_backend) -> None:
    backend_cls, recorder = flashinfer_backend
    model = tiny_llama_decoder()
    prompts = [[5, 9, 13, 2, 7], [3, 3], [11, 40, 8, 1, 60, 33, 2]]
    runtime = RecordingRuntime()
    eager = ModelRunner(
        model, cpu_platform_with(DeviceRuntime()), NUM_SLOTS, backend_cls(4, 2, 16, torch.float32, "cpu")
    )
    graphed = ModelRunner(
        model, cpu_platform_with(runtime), NUM_SLOTS, backend_cls(4, 2, 16, torch.float32, "cpu"), BUCKETS
    )
    assert isinstance(eager.step_runner, EagerStepRunner)
    assert isinstance(graphed.step_runner, CapturedStepRunner)

    for buffer in (*eager.kv_buffers, *graphed.kv_buffers):
        buffer.zero_()  # the pool starts uninitialized: give untouched slots a value to compare
    expected = _generate(eager, prompts, steps=6)
    indptr = graphed.attn_backend._static["indptr"]
    storage = indptr.data_ptr()
    actual = _generate(graphed, prompts, steps=6)

    assert actual == expected
    assert graphed.step_runner.stats.captured_buckets == [4], "three rows run in bucket 4, captured once"
    assert graphed.step_runner.stats.static_steps == 6 and graphed.step_runner.stats.static_fallbacks == 0
    assert len(runtime.captured) == 1 and runtime.replays == 6
    # Metadata lives in static buffers refilled in place: same storage, the last step's page view.
    assert indptr.data_ptr() == storage
    assert indptr[:5].tolist() == [0, 11, 19, 32, 33], "three real rows, then the padded row's one page"
    graph_plans = [c for name, c in recorder.calls if name == "decode.plan" and c["graph"]]
    assert len(graph_plans) >= 6, "every replay re-plans the bucket's static wrapper"
    # The padded row wrote only the scratch slot: every other slot matches the eager run (to
    # rounding: a 4-row matmul may block differently from a 3-row one), untouched slots exactly.
    for ours, theirs in zip(graphed.kv_buffers, eager.kv_buffers):
        torch.testing.assert_close(ours[:, 1:], theirs[:, 1:], atol=1e-5, rtol=1e-5)
        assert torch.equal(ours[:, 1 + 3 * SPAN :], theirs[:, 1 + 3 * SPAN :])
        assert not torch.equal(ours[:, 0], theirs[:, 0]), "the padded row's K/V went to slot 0"


def test_step_routing(flashinfer_backend) -> None:
    """Decode batches a bucket holds replay; prefill, batches past the largest bucket, rows past
    the static tables and batches whose shared prefixes overflow the static slot table run
    eagerly (the last counted as fallbacks), each with the eager runner's logits."""
    backend_cls, _ = flashinfer_backend
    model = tiny_llama_decoder()
    backend = backend_cls(4, 2, 16, torch.float32, "cpu")
    cpu = torch.device("cpu")
    eager = EagerStepRunner(model, backend_cls(4, 2, 16, torch.float32, "cpu"), cpu)
    limits = CaptureLimits.for_pool(max_batch=8, num_slots=16, max_seq_len=64)
    assert limits.max_kv_entries == 4 * 16 + 8, "four pools' worth, below max_batch * max_seq_len"
    runner = CapturedStepRunner(EagerStepRunner(model, backend, cpu), RecordingRuntime(), BUCKETS, limits)
    assert runner.disabled_reason is None
    kv = eager.allocate_kv(backend.kv_buffer_shape(1 + 10 * SPAN), torch.float32, 2)
    for buffer in kv:
        buffer.zero_()

    def run(step: StepInputs) -> tuple[int, int, int]:
        before = (runner.stats.static_steps, runner.stats.eager_steps, runner.stats.static_fallbacks)
        ours, _ = runner.run(step, [b.clone() for b in kv])
        theirs, _ = eager.run(step, [b.clone() for b in kv])
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)
        after = (runner.stats.static_steps, runner.stats.eager_steps, runner.stats.static_fallbacks)
        return tuple(a - b for a, b in zip(after, before))

    def decode(lens: list[int]) -> StepInputs:
        return _step([[7] * n for n in lens], [1] * len(lens))

    assert run(decode([3, 4, 5])) == (1, 0, 0)
    assert run(_step([[5, 9, 13, 2]], [4])) == (0, 1, 0), "prefill: eager"
    assert run(decode([2] * 9)) == (0, 1, 0), "larger than every bucket: eager"
    assert run(decode([65])) == (0, 1, 1), "longer than the static tables: eager, counted"
    shared = [torch.cat([_slots(0, 30), _slots(1 + i, 1)]) for i in range(4)]
    sharing = StepInputs(
        input_ids=torch.tensor([7] * 4),
        positions=torch.tensor([30] * 4),
        attention=AttentionInputs((31,) * 4, (1,) * 4, torch.cat(shared)),
        logit_rows=torch.arange(4),
    )
    assert sharing.attention.kv_slots.numel() > limits.max_kv_entries
    assert run(sharing) == (0, 1, 1), "rows sharing a prefix past the slot table: eager, counted"
    padded = pad_decode(decode([3, 4, 5]).attention, 4)
    assert padded.seq_lens == (3, 4, 5, 1) and int(padded.kv_slots[-1]) == 0


def test_backend_without_capture_runs_eagerly() -> None:
    model = tiny_llama_decoder()
    runner = ModelRunner(
        model,
        cpu_platform_with(RecordingRuntime()),
        NUM_SLOTS,
        ReferenceAttention(4, 2, 16, torch.float32, torch.device("cpu")),
        BUCKETS,
    )
    assert isinstance(runner.step_runner, EagerStepRunner)


def test_disable_cuda_graph_flag() -> None:
    assert ServerArgs(disable_cuda_graph=True).graph_buckets() is None
    assert ServerArgs(max_running_requests=24).graph_buckets() == BucketPolicy.up_to(24)
    assert ServerArgs(cuda_graph_max_bs=4).graph_buckets().largest == 4


def test_platform_bucket_capabilities() -> None:
    """cpu captures every batch size up to its default largest bucket (a padded row costs what a
    real one does there); `--cuda-graph-max-bs` overrides the default, never beyond the running cap."""
    cpu = CpuPlatform.capabilities
    assert cpu.steps.exact_buckets and cpu.steps.default_max_batch is not None
    assert ServerArgs().graph_buckets(cpu) == BucketPolicy(tuple(range(1, cpu.steps.default_max_batch + 1)))
    assert ServerArgs(cuda_graph_max_bs=3).graph_buckets(cpu).sizes == (1, 2, 3)
    assert ServerArgs(cuda_graph_max_bs=40, max_running_requests=24).graph_buckets(cpu).largest == 24
    padded = dataclasses.replace(cpu, steps=dataclasses.replace(cpu.steps, exact_buckets=False, default_max_batch=None))
    assert ServerArgs(max_running_requests=24).graph_buckets(padded) == BucketPolicy.up_to(24)
    assert ServerArgs(disable_cuda_graph=True).graph_buckets(cpu) is None


def test_traced_steps_stay_off_under_tensor_parallelism(caplog) -> None:
    """A TorchScript trace cannot record a `torch.distributed` collective (tracing one raises), so
    the cpu runtime's captures are off in a group of more than one rank, and on in a group of one."""
    model = tiny_llama_decoder()
    backend = PoolDecodeAttention(4, 2, 16, torch.float32, torch.device("cpu"))
    platform = cpu_platform_with(TracedDecodeRuntime())
    assert isinstance(ModelRunner(model, platform, NUM_SLOTS, backend, BUCKETS).step_runner, CapturedStepRunner)
    with using_tp_group(TPGroup(0, 2, SingleProcessCommunicator())), caplog.at_level(logging.INFO):
        assert isinstance(ModelRunner(model, platform, NUM_SLOTS, backend, BUCKETS).step_runner, EagerStepRunner)
    assert "static steps cannot hold collectives" in caplog.text


def test_each_rank_logs_the_kv_heads_it_holds(caplog) -> None:
    """3 KV heads over 2 ranks: rank 0 holds 2 and rank 1 holds 1, so for the same slot count
    rank 0's pool is twice rank 1's. The log says so (it once read like a double allocation)."""
    heads = {"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 3, "vocab_size": 96}
    config = ModelConfig.from_dict(TINY_LLAMA_CONFIG | heads)
    sizes = {}
    for rank in range(2):
        caplog.clear()
        with using_tp_group(TPGroup(rank, 2, SingleProcessCommunicator())), caplog.at_level(logging.INFO):
            model = DecoderForCausalLM(config, torch.float32)
            runner = ModelRunner(model, CpuPlatform(), NUM_SLOTS)
        line = next(r.getMessage() for r in caplog.records if r.getMessage().startswith("KV cache:"))
        assert f"x {2 - rank} KV heads (tp rank {rank} of 2)" in line
        sizes[rank] = sum(b.numel() for b in runner.kv_buffers)
    assert sizes[0] == 2 * sizes[1]
