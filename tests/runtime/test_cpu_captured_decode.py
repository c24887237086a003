"""Captured decode on cpu gives the eager step's greedy tokens, for every way cpu makes a bucket's
step static: taped (the default), traced (where a tape cannot replay a step) and compiled by
inductor (`SGLANG_CPU_COMPILE_DECODE=1`).

The embedded model, served quantized, decodes five chat prompts of different lengths through the
graph runner with buckets (1, 2, 4, 8) and through the eager step, taped over a float32 pool and a
bfloat16 one (`--kv-cache-dtype bf16`), traced, and traced with `torch.jit.trace` removed (it is
deprecated), where the buckets replay the untraced step. Rows leave one by one, so the
batch runs as bucket 8 (5 rows, 3 padded), then 4 (4 and 3 rows: across a bucket boundary), 2
and 1. Every row's tokens must match the eager ones exactly: the padding writes only the scratch
slot, the kernels' results do not depend on the batch size, and a replay reads the step's new
ids, positions and metadata (each step feeds back the last token). The compiled case is slow: a
cold compile takes minutes on 2 cores (the inductor cache under ~/.cache makes reruns take
seconds per graph).
"""

from __future__ import annotations

import pytest
import torch

from sglang.ops.attention import AttentionInputs, AttentionLayer, CaptureLimits
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import StepInputs
from sglang.platforms.cpu.platform import COMPILE_ENV, CpuPlatform
from sglang.platforms.cpu.runtime import CompiledDecodeRuntime, TapedDecodeRuntime, TracedDecodeRuntime
from sglang.platforms.execution.captured import CapturedStepRunner
from sglang.platforms.kernels.cpu_cpp.attention import PoolDecodeAttention
from sglang.platforms.kernels.cpu_cpp.step_tape import TapedStep
from sglang.runtime.execution.model_runner import ModelRunner, attention_backend_for
from sglang.runtime.loader.model_loading import load_model
from sglang.runtime.server_args import ServerArgs

QUESTIONS = (
    "What is the capital of France?",
    "Name three primary colors.",
    "Write one sentence about the sea.",
    "Count to five.",
    "What is two plus two? Answer briefly.",
)
SPAN = 96
STEPS = 10


def greedy(runner: ModelRunner, prompts: list[list[int]]) -> list[list[int]]:
    """Prefill each prompt, then decode all rows together; row i stops after STEPS - i tokens."""
    rows = [list(p) for p in prompts]
    slots = [torch.arange(1 + i * SPAN, 1 + (i + 1) * SPAN) for i in range(len(prompts))]
    out: list[list[int]] = [[] for _ in prompts]
    for i, tokens in enumerate(rows):
        n = len(tokens)
        step = StepInputs(
            torch.tensor(tokens), torch.arange(n), AttentionInputs((n,), (n,), slots[i][:n]), torch.tensor([n - 1])
        )
        out[i].append(int(runner.forward(step)[0].argmax()))
    for t in range(1, STEPS):
        live = [i for i in range(len(rows)) if t < STEPS - i]
        lens = tuple(len(rows[i]) + len(out[i]) for i in live)
        step = StepInputs(
            input_ids=torch.tensor([out[i][-1] for i in live]),
            positions=torch.tensor([n - 1 for n in lens]),
            attention=AttentionInputs(lens, (1,) * len(live), torch.cat([slots[i][:n] for i, n in zip(live, lens)])),
            logit_rows=torch.arange(len(live)),
        )
        for i, token in zip(live, runner.forward(step).argmax(-1).tolist()):
            out[i].append(token)
    return out


@pytest.mark.parametrize(
    ("capture", "kv_cache_dtype"),
    [
        pytest.param("taped", "auto", id="taped"),
        pytest.param("taped", "bf16", id="taped-bfloat16-pool"),
        pytest.param("traced", "auto", id="traced"),
        pytest.param("untraced", "auto", id="torch-without-jit-trace", marks=pytest.mark.slow),
        pytest.param("compiled", "auto", id="compiled", marks=pytest.mark.slow),
    ],
)
def test_captured_buckets_match_eager(monkeypatch, caplog, capture: str, kv_cache_dtype: str) -> None:
    loaded = load_model(ServerArgs(device="cpu"))
    tokenizer = loaded.load_tokenizer()
    prompts = [
        tokenizer.encode(
            tokenizer.apply_chat_template([{"role": "user", "content": q}], tokenize=False, add_generation_prompt=True),
            add_special_tokens=False,
        )
        for q in QUESTIONS
    ]
    slots = len(prompts) * SPAN + 1

    def backend(platform: CpuPlatform) -> PoolDecodeAttention:
        return attention_backend_for(loaded.model, platform, kv_cache_dtype=kv_cache_dtype)

    eager_runner = ModelRunner(loaded.model, CpuPlatform(), slots, backend(CpuPlatform()))
    assert eager_runner.kv_buffers[0].dtype == (torch.bfloat16 if kv_cache_dtype == "bf16" else torch.float32)
    eager = greedy(eager_runner, prompts)
    if capture == "compiled":
        monkeypatch.setenv(COMPILE_ENV, "1")
    else:
        monkeypatch.delenv(COMPILE_ENV, raising=False)
    platform = CpuPlatform()
    assert isinstance(platform.runtime, CompiledDecodeRuntime if capture == "compiled" else TapedDecodeRuntime)
    if capture in ("traced", "untraced"):
        platform.runtime = TracedDecodeRuntime()
    if capture == "untraced":  # torch.jit.trace is deprecated: a torch that removed it still serves
        monkeypatch.delattr(torch.jit, "trace")
    runner = ModelRunner(loaded.model, platform, slots, backend(platform), graph_buckets=BucketPolicy((1, 2, 4, 8)))
    assert isinstance(runner.step_runner, CapturedStepRunner)
    with caplog.at_level("INFO", logger="sglang.platforms.cpu.runtime"):
        assert greedy(runner, prompts) == eager
    assert ("has no torch.jit.trace" in caplog.text) == (capture == "untraced")
    assert "not taped" not in caplog.text
    assert sorted(runner.step_runner.stats.captured_buckets) == [1, 2, 4, 8]
    replays = runner.step_runner._replays.values()
    assert all(isinstance(r, TapedStep) for r in replays) == (capture == "taped")


def test_pool_attention_captures_every_float32_layer_kind() -> None:
    """A captured step has no per-step plan, so every layer must take the kernel's path: it serves
    sliding windows, soft-capping and sinks over float32 and bfloat16 pools; a model of another
    dtype than float32 (the SDPA fallback) is refused."""
    plain, windowed = AttentionLayer(0, 0.125), AttentionLayer(1, 0.125, sliding_window=64)
    capped = AttentionLayer(2, 0.125, logit_softcap=30.0)
    sinks = AttentionLayer(3, 0.125, sliding_window=8, sinks=True)

    def reason(
        layers: tuple[AttentionLayer, ...], dtype: torch.dtype = torch.float32, pool: torch.dtype | None = None
    ) -> str | None:
        backend = PoolDecodeAttention(4, 2, 64, dtype, torch.device("cpu"))
        backend.kv_dtype = pool or dtype
        return backend.init_capture(CaptureLimits.for_pool(max_batch=4, num_slots=32, max_seq_len=64, layers=layers))

    assert reason((plain,)) is None
    assert reason((plain, windowed, capped, sinks)) is None
    assert reason((plain, windowed, capped, sinks), pool=torch.bfloat16) is None
    assert "float32" in reason((plain,), torch.bfloat16)
