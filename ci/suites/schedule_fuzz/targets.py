"""The backends the schedule fuzzer holds to the oracle, and how each one's Engine is started.

Every backend this machine can run: the cpu platform's own kernels (its first declared family, a C++
one, read from the platform rather than named here) with decode capture on and off, with NGRAM
speculative decoding and with a STANDALONE draft model; the torch_native family alone; every op
forced to its reference; the triton family in Triton's interpreter on cpu tensors; and the tpu
platform on XLA:CPU (the last two also with NGRAM, the tpu platform with STANDALONE too; the cpu and
tpu platforms also with LoRA adapters); and the cpu platform's kernels over a bfloat16 KV pool. The
Llama runs on all of them; DeepSeek V2 and gpt-oss (`fuzz_model.FUZZ_MODELS`) on all but the LoRA
ones, under `-m slow` only (the CI budget). Families are replaced through `SGLANG_KERNEL_FAMILIES`
(runtime/loader/model_loading.py); environment variables are set before the engine spawns its
processes, which inherit them (`TRITON_INTERPRET` must be set before triton is imported,
`JAX_PLATFORMS` before jax is).
"""

from __future__ import annotations

import contextlib
import importlib.util
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

from sglang.ci.suites.schedule_fuzz.fuzz_model import FUZZ_MODELS, LLAMA
from sglang.ci.suites.schedule_fuzz.strategies import FULL, INTERPRETED, WorkloadBudget
from sglang.platforms.registry import platform_class
from sglang.runtime.engine import Engine
from sglang.runtime.loader.model_loading import KERNEL_FAMILIES_ENV
from sglang.runtime.memory.hicache_setup import STORAGE_DIR_ENV

POOL_TOKENS = 2048
"""KV pool of every fuzzed engine: the regression schedule's pool, and small enough that the
`FULL` budget's workloads evict the prefix cache and retract requests."""
CHUNK_TOKENS = 128
"""Longer prompts are prefilled in chunks (the ~420-token regression prompt in four)."""
CAPTURE_MAX_BATCH = 8
"""Decode batches up to 8 rows replay captured steps (each bucket costs a capture on first use);
8 covers the `n = 8` regression schedule."""
HICACHE_ARGS: dict[str, Any] = {
    "enable_hierarchical_cache": True,
    "hicache_storage_backend": "file",
    "hicache_write_policy": "write_back",
    "hicache_storage_backend_extra_config": '{"block_tokens": 16}',
    "hicache_ratio": 0.5,
    "hicache_storage_prefetch_policy": "wait_complete",
    "radix_eviction_policy": "lfu",
    "max_total_tokens": POOL_TOKENS // 2,
}
"""The hierarchical cache on a pool half the others' size: prefixes leave the pool often, are
backed up on their way out (write_back) to a host tier half the pool's size and from there to the
storage tier (a fresh folder per engine), and come back from either, which the oracle's outputs
must not notice."""
ENGINE_ARGS: dict[str, Any] = {
    "max_total_tokens": POOL_TOKENS,
    "chunked_prefill_size": CHUNK_TOKENS,
    "cpu_threads": 1,
    "log_level": "warning",
}


@dataclass(frozen=True)
class FuzzTarget:
    """One backend serving one fuzz model. Invariant: `attention_family` is the family the
    engine must bind the model's attention op from (checked after start, so a mechanism that
    silently falls back cannot pass), or None where every op is forced to its reference."""

    id: str
    device: str
    engine_args: dict[str, Any]
    budget: WorkloadBudget
    examples: int
    """Workloads per default (CI) run; `slow_examples` under `-m slow`."""
    slow_examples: int
    attention_family: str | None
    env: dict[str, str] = field(default_factory=dict)
    lora: bool = False
    """Serves the fuzz adapters (`lora_adapters.ADAPTERS`), which the workloads then draw from."""
    slow_only: bool = False
    """Left out of the default run (CI budget): fuzzed and its regressions run under `-m slow`."""
    model: str = LLAMA.name
    """The served model's name in `fuzz_model.FUZZ_MODELS`."""
    oracle_args: dict[str, Any] = field(default_factory=dict)
    """Settings the oracle takes from the target: a KV pool's dtype is part of the numerics every
    schedule must reproduce, not of the schedule."""

    def unavailable(self) -> str | None:
        """Why this machine cannot run the target, or None. Checked with the target's environment."""
        if self.env.get("TRITON_INTERPRET") and importlib.util.find_spec("triton") is None:
            return "triton is not installed"
        if self.lora and importlib.util.find_spec("peft") is None:
            return "peft (which makes the adapters) is not installed"
        with pytest.MonkeyPatch.context() as patch:
            for name, value in self.env.items():
                patch.setenv(name, value)
            state = platform_class(self.device).availability()
        return None if state.available else f"{self.device}: {state.reason}"


NEW_KIND_MODELS = ("deepseek-v2", "gpt-oss")
"""The models of issue 30's attention and layer kinds, fuzzed on every backend the Llama is."""


def fuzz_targets() -> tuple[FuzzTarget, ...]:
    backends = llama_targets()
    models = tuple(target for model in NEW_KIND_MODELS for target in model_targets(model, backends))
    return backends + models + (window_pool_target(),)


def window_pool_target() -> FuzzTarget:
    """gpt-oss with a window pool at its floor (`--swa-full-tokens-ratio 0.05`: a chunk, the
    window and a margin, 216 window slots for the 2048-token pool), captured: requests wait for
    window room, tails leave it as they decode, cached prefixes are cut where their window slots
    are gone. The other gpt-oss targets serve the default ratio (0.8) where the backend declares
    the window pool. Slow only (the CI budget); tests/runtime/test_window_pool.py runs by default."""
    cpp = platform_class("cpu").kernel_families[0]
    args = {"cuda_graph_max_bs": CAPTURE_MAX_BATCH, "swa_full_tokens_ratio": 0.05}
    return FuzzTarget(f"gpt-oss-cpu-{cpp}-window-pool", "cpu", args, FULL, 2, 30, cpp, slow_only=True, model="gpt-oss")


def model_targets(model: str, backends: tuple[FuzzTarget, ...]) -> tuple[FuzzTarget, ...]:
    """`model` on each of the Llama's `backends` but the LoRA ones (their adapters are the
    Llama's), all slow only: each model adds an oracle engine and a target engine (about 20 s
    each to start on the loaded CI machine) to a run. By default
    tests/runtime/test_cpu_captured_layer_kinds.py and tests/ops/test_moe_reference.py guard what
    these targets found (captured latent-attention decode, traceable grouped routing). Not the
    LoRA targets (their adapters are the Llama's) nor those with oracle settings of their own."""
    return tuple(
        replace(target, id=f"{model}-{target.id}", model=model, examples=2, slow_only=True)
        for target in backends
        if not target.lora and not target.oracle_args
    )


def llama_targets() -> tuple[FuzzTarget, ...]:
    cpp = platform_class("cpu").kernel_families[0]
    capture = {"cuda_graph_max_bs": CAPTURE_MAX_BATCH}
    eager = {"disable_cuda_graph": True}
    ngram = {"speculative_algorithm": "NGRAM"}
    # The fuzz model drafts for itself (`started`): greedy drafts are all accepted, so verify steps
    # append whole runs across stops and max_new_tokens; sampled requests reject some.
    standalone = {"speculative_algorithm": "STANDALONE", "speculative_num_steps": 3, "speculative_num_draft_tokens": 4}
    native = {KERNEL_FAMILIES_ENV: "torch_native"}
    bf16_pool = {"kv_cache_dtype": "bf16"}
    interpreted = {KERNEL_FAMILIES_ENV: "triton", "TRITON_INTERPRET": "1"}
    return (
        FuzzTarget(f"cpu-{cpp}-capture", "cpu", capture, FULL, 3, 40, cpp),
        FuzzTarget(f"cpu-{cpp}-eager", "cpu", eager, FULL, 3, 40, cpp),
        # Three adapters and the base model over two device slots: requests wait for slots (slow:
        # the CI budget; tests/lora checks mixed adapter batches against PEFT by default).
        FuzzTarget(
            f"cpu-{cpp}-lora", "cpu", {**capture, "max_loras_per_batch": 2}, FULL, 2, 30, cpp, lora=True, slow_only=True
        ),
        # Speculative decoding: verify steps (extends) among captured decode steps.
        FuzzTarget(f"cpu-{cpp}-ngram", "cpu", {**capture, **ngram}, FULL, 2, 40, cpp),
        # Draft-model steps (their own pool, eager) before captured verify steps (slow: the CI
        # budget; tests/runtime/test_speculative.py serves a draft model by default).
        FuzzTarget(f"cpu-{cpp}-standalone", "cpu", {**capture, **standalone}, FULL, 2, 30, cpp, slow_only=True),
        FuzzTarget(f"cpu-{cpp}-hicache", "cpu", {**capture, **HICACHE_ARGS}, FULL, 2, 30, cpp, slow_only=True),
        FuzzTarget("cpu-torch_native", "cpu", eager, FULL, 3, 30, "torch_native", native),
        FuzzTarget("cpu-reference", "cpu", {**capture, "reference_ops": True}, FULL, 2, 30, None),
        # Capture would trace interpreted kernels; this target checks the kernels, not capture.
        FuzzTarget("cpu-triton-interpreted", "cpu", eager, INTERPRETED, 2, 12, "triton", interpreted),
        FuzzTarget("tpu-xla-cpu", "tpu", {}, FULL, 2, 20, "jax", {"JAX_PLATFORMS": "cpu"}),
        # The adapters through the jitted steps (slow, as the cpu LoRA target is).
        FuzzTarget(
            "tpu-xla-cpu-lora",
            "tpu",
            {"max_loras_per_batch": 2},
            FULL,
            2,
            20,
            "jax",
            {"JAX_PLATFORMS": "cpu"},
            lora=True,
            slow_only=True,
        ),
        # Verify steps through the triton family's extend kernels and the tpu platform's jitted
        # steps (slow: interpreted kernels and XLA:CPU compiles of each verify shape take minutes;
        # the cpu ngram target above runs by default).
        FuzzTarget(
            "cpu-triton-interpreted-ngram",
            "cpu",
            {**eager, **ngram},
            INTERPRETED,
            2,
            12,
            "triton",
            interpreted,
            slow_only=True,
        ),
        FuzzTarget("tpu-xla-cpu-ngram", "tpu", ngram, FULL, 2, 20, "jax", {"JAX_PLATFORMS": "cpu"}, slow_only=True),
        FuzzTarget(
            "tpu-xla-cpu-standalone", "tpu", standalone, FULL, 2, 20, "jax", {"JAX_PLATFORMS": "cpu"}, slow_only=True
        ),
        # A bfloat16 pool (`--kv-cache-dtype bf16`) through captured steps, held to an oracle
        # whose reference attention reads a bfloat16 pool too. Last: its oracle is an engine of its own.
        FuzzTarget(f"cpu-{cpp}-bf16-pool", "cpu", {**capture, **bf16_pool}, FULL, 2, 30, cpp, oracle_args=bf16_pool),
    )


def attention_family(engine: Engine, attention_op: str) -> str | None:
    """The family the engine bound `attention_op` from, or None when every op is the reference."""
    table = engine.info.op_table
    if table["forced_reference"]:
        return None
    return next(op["family"] for op in table["ops"] if op["op"] == attention_op)


@contextlib.contextmanager
def started(target: FuzzTarget, model: Path, **overrides: Any) -> Iterator[Engine]:
    """The target's engine serving `model`, its environment set while it lives; shut down after.
    A STANDALONE target drafts with `model` itself."""
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as storage:
        patch.setenv(STORAGE_DIR_ENV, storage)  # where a target with the storage tier keeps it
        for name, value in target.env.items():
            patch.setenv(name, value)
        args = {**ENGINE_ARGS, **target.engine_args, **overrides}
        if args.get("speculative_algorithm") == "STANDALONE":
            args.setdefault("speculative_draft_model_path", str(model))
        engine = Engine(str(model), device=target.device, **args)
        try:
            attention_op = FUZZ_MODELS[target.model].attention_op
            bound = attention_family(engine, attention_op)
            assert bound == target.attention_family, f"{target.id}: {attention_op} bound from {bound}"
            yield engine
        finally:
            engine.shutdown()
