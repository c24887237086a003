"""NPU decode graphs: `NpuRuntime.capture_graph` against the torch_npu stand-in's `torch.npu`.

The stand-in's `NPUGraph` records the aten calls made during capture and replays them over the
captured tensors (see `torch_npu_standin._CapturedOps`): a replay never runs Python again, so
these tests fail if a step depends on anything but the contents of its static buffers. The
attention backend for the end-to-end check is a reference attention whose decode buckets read
static buffers only; torch_npu's own attention refuses capture, and the runner says why.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pytest
import torch

from sglang import ops
from sglang.ops.attention import AttentionInputs, AttentionMetadata, CaptureLimits, ReferenceAttention
from sglang.ops.binding import REFERENCE_OPS, resolve, restore, snapshot
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import StepInputs
from sglang.platforms.device_runtime import GRAPH_WARMUP_RUNS, DeviceRuntime
from sglang.platforms.execution.captured import CapturedStepRunner
from sglang.platforms.execution.eager import EagerStepRunner
from sglang.platforms.npu.runtime import NpuRuntime
from sglang.runtime.execution.model_runner import ModelRunner

from ..tiny_decoder import cpu_platform_with, tiny_llama_decoder
from .standin import ContractError, Recorder, installed
from .torch_npu_standin import build

BUCKETS = BucketPolicy((1, 2, 4, 8))
NUM_SLOTS = 256
SPAN = 40
"""Slots per sequence: sequence `i` owns slots `1 + i * SPAN ...` (slot 0 is the scratch slot)."""


@pytest.fixture
def npu(monkeypatch):
    """The stand-in installed as `torch_npu`, and its graph module as `torch.npu`."""
    recorder = Recorder()
    standin = build(recorder)
    with installed(monkeypatch, standin, "sglang.platforms.kernels.torch_npu"):
        monkeypatch.setattr(torch, "npu", standin["torch_npu.npu"], raising=False)
        yield recorder


@pytest.fixture
def reference_ops():
    """Every op bound to its reference while the test runs. The stand-in's graph records aten
    calls only, so an op bound to a family's kernel outside torch's dispatcher (cpu_cpp's, which an
    engine started earlier in the same process binds) would be missing from the replay."""
    saved = snapshot()
    restore({name: resolve(qualname) for name, qualname in REFERENCE_OPS.items()})
    yield
    restore(saved)


def test_capture_warms_up_on_a_side_stream_then_replays_without_python(npu) -> None:
    static = torch.tensor([1.0, 2.0, 3.0])
    runs = []

    def fn() -> torch.Tensor:
        runs.append(1)
        return static * 2 + 1

    replay = NpuRuntime().capture_graph(fn)
    assert len(runs) == GRAPH_WARMUP_RUNS + 1, "warm-up runs, then one captured run"
    names = npu.names()
    assert names[:3] == ["Stream.wait_stream", "stream", "Stream.wait_stream"], "warm-up on a side stream"
    assert names[3:] == ["NPUGraph.capture_begin", "NPUGraph.capture_end"]
    side = npu.calls[1][1]["stream"]
    assert npu.last("NPUGraph.capture_begin")["stream"] != side, "the capture has its own stream"

    output = replay()
    static.copy_(torch.tensor([10.0, 20.0, 30.0]))
    again = replay()
    assert again is output, "a replay hands back the captured output tensor"
    assert again.tolist() == [21.0, 41.0, 61.0], "the replay read the static input's new contents"
    assert len(runs) == GRAPH_WARMUP_RUNS + 1 and npu.names().count("NPUGraph.replay") == 2


def test_a_host_read_inside_capture_fails(npu) -> None:
    static = torch.tensor([1.0, 2.0])
    with pytest.raises(ContractError, match="host read"):
        NpuRuntime().capture_graph(lambda: static * float(static.sum()))


@dataclass
class StaticDecodeMetadata(AttentionMetadata):
    table: torch.Tensor = field(default=None, repr=False)
    """`[rows, max_seq_len]` cache slots per row (zero past its length)."""
    lens: torch.Tensor = field(default=None, repr=False)


class StaticDecodeAttention(ReferenceAttention):
    """Reference attention whose decode steps are tensor ops over a slot table and lengths (no
    host loops or reads), eager or captured alike; prefill is the reference's."""

    def plan(self, inputs: AttentionInputs) -> AttentionMetadata:
        if not inputs.is_decode:
            return super().plan(inputs)
        rows = len(inputs.seq_lens)
        meta = StaticDecodeMetadata(
            inputs=inputs,
            new_slots=torch.zeros(rows, dtype=torch.long),
            table=torch.zeros(rows, max(inputs.seq_lens), dtype=torch.long),
            lens=torch.zeros(rows, dtype=torch.long),
        )
        self._fill(meta, inputs)
        return meta

    @staticmethod
    def _fill(meta: StaticDecodeMetadata, inputs: AttentionInputs) -> None:
        meta.table.zero_()
        starts = inputs.kv_starts
        for row in range(len(inputs.seq_lens)):
            meta.table[row, : starts[row + 1] - starts[row]] = inputs.kv_slots[starts[row] : starts[row + 1]]
        meta.lens.copy_(torch.tensor(inputs.seq_lens))
        meta.new_slots.copy_(inputs.new_slots())

    def init_capture(self, limits: CaptureLimits) -> str | None:
        self._static: dict[int, StaticDecodeMetadata] = {}
        self._width = limits.max_seq_len
        return None

    def capture_metadata(self, batch: int) -> AttentionMetadata:
        inputs = AttentionInputs((1,) * batch, (1,) * batch, torch.zeros(batch, dtype=torch.long))
        meta = StaticDecodeMetadata(
            inputs=inputs,
            new_slots=torch.zeros(batch, dtype=torch.long),
            table=torch.zeros(batch, self._width, dtype=torch.long),
            lens=torch.ones(batch, dtype=torch.long),
        )
        self._static[batch] = meta
        return meta

    def replay_metadata(self, batch: int, inputs: AttentionInputs) -> None:
        self._fill(self._static[batch], inputs)

    def forward(self, q, k, v, kv_buffer, metadata, layer):
        if not isinstance(metadata, StaticDecodeMetadata):
            return super().forward(q, k, v, kv_buffer, metadata, layer)
        kv_buffer = ops.store_kv(kv_buffer, metadata.new_slots, k, v)
        group = self.num_heads // self.num_kv_heads
        keys = kv_buffer[0][metadata.table].repeat_interleave(group, dim=2).float()
        values = kv_buffer[1][metadata.table].repeat_interleave(group, dim=2).float()
        scores = torch.einsum("bhd,blhd->bhl", q.float(), keys) * layer.scale
        visible = torch.arange(metadata.table.shape[1]) < metadata.lens[:, None]
        scores = scores.masked_fill(~visible[:, None, :], float("-inf"))
        return torch.einsum("bhl,blhd->bhd", scores.softmax(-1), values).to(q.dtype), kv_buffer


def _step(tokens: list[list[int]], new: list[int]) -> StepInputs:
    """Each sequence's tokens so far; `new[i]` of them are new in this step."""
    ids = [t for seq, n in zip(tokens, new) for t in seq[len(seq) - n :]]
    positions = [p for seq, n in zip(tokens, new) for p in range(len(seq) - n, len(seq))]
    slots = [torch.arange(1 + i * SPAN, 1 + i * SPAN + len(s)) for i, s in enumerate(tokens)]
    return StepInputs(
        input_ids=torch.tensor(ids),
        positions=torch.tensor(positions),
        attention=AttentionInputs(tuple(len(s) for s in tokens), tuple(new), torch.cat(slots)),
        logit_rows=torch.tensor(new).cumsum(0) - 1,
    )


def _generate(runner: ModelRunner, prompts: list[list[int]], steps: int) -> list[list[int]]:
    tokens = [list(p) for p in prompts]
    logits = runner.forward(_step(tokens, [len(p) for p in prompts]))
    for _ in range(steps):
        assert logits.shape[0] == len(tokens), "padded rows must not reach sampling"
        for seq, token in zip(tokens, logits.argmax(-1).tolist()):
            seq.append(token)
        logits = runner.forward(_step(tokens, [1] * len(tokens)))
    return tokens


def test_same_tokens_with_and_without_npu_graphs(npu, reference_ops) -> None:
    model = tiny_llama_decoder()
    prompts = [[5, 9, 13, 2, 7], [3, 3], [11, 40, 8, 1, 60, 33, 2]]

    def backend() -> StaticDecodeAttention:
        return StaticDecodeAttention(4, 2, 16, torch.float32, torch.device("cpu"))

    eager = ModelRunner(model, cpu_platform_with(DeviceRuntime()), NUM_SLOTS, backend())
    graphed = ModelRunner(model, cpu_platform_with(NpuRuntime()), NUM_SLOTS, backend(), BUCKETS)
    assert isinstance(eager.step_runner, EagerStepRunner)
    assert isinstance(graphed.step_runner, CapturedStepRunner)

    for buffer in (*eager.kv_buffers, *graphed.kv_buffers):
        buffer.zero_()  # the pool starts uninitialized: give untouched slots a value to compare
    expected = _generate(eager, prompts, steps=6)
    actual = _generate(graphed, prompts, steps=6)

    assert actual == expected
    assert graphed.step_runner.stats.captured_buckets == [4], "three rows run in bucket 4, captured once"
    assert npu.names().count("NPUGraph.capture_end") == 1 and npu.names().count("NPUGraph.replay") == 6
    assert npu.last("NPUGraph.capture_end")["calls"] > 0, "the step's work was recorded in the graph"
    for ours, theirs in zip(graphed.kv_buffers, eager.kv_buffers):
        torch.testing.assert_close(ours[:, 1:], theirs[:, 1:], atol=1e-5, rtol=1e-5)
        assert not torch.equal(ours[:, 0], theirs[:, 0]), "the padded row's K/V went to the scratch slot"


def test_npu_attention_keeps_decode_graphs_off_and_says_why(npu, caplog) -> None:
    attention = resolve("sglang.platforms.kernels.torch_npu.attention:NpuAttention")
    backend = attention(4, 2, 16, torch.float32, torch.device("cpu"))
    backend.page_size = 16
    with caplog.at_level(logging.INFO, logger="sglang.platforms.base"):
        runner = ModelRunner(tiny_llama_decoder(), cpu_platform_with(NpuRuntime()), NUM_SLOTS, backend, BUCKETS)
    assert isinstance(runner.step_runner, EagerStepRunner)
    assert "decode steps eager: torch_npu's fused infer attention takes sequence lengths as host lists" in caplog.text
    assert "NPUGraph.capture_begin" not in npu.names()
