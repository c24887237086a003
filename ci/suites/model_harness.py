"""Helpers for model parity: tiny random Hugging Face models, platform targets, a paged runner.

Everything here is device-neutral: a test names a `Target` (a platform, optionally forced onto
the reference ops) and a `Schedule` (which tokens of which sequence each step feeds), and
compares our logits with transformers' full-sequence forward at the same positions.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    DeepseekV2Config,
    DeepseekV3Config,
    Gemma2Config,
    Gemma3TextConfig,
    Glm4MoeConfig,
    GptOssConfig,
    LlamaConfig,
    MistralConfig,
    MixtralConfig,
    Phi3Config,
    PreTrainedConfig,
    Qwen2Config,
    Qwen2MoeConfig,
    Qwen3Config,
    Qwen3MoeConfig,
)

from sglang import ops
from sglang.ci.suites import devices
from sglang.ops.binding import restore, snapshot
from sglang.ops.selection import OpTable
from sglang.ops.step import ForwardContext
from sglang.platforms import Platform
from sglang.platforms.base import ModelFacts
from sglang.runtime.models.config import ModelConfig
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.models.registry import model_class_for

PROMPT_LENS: tuple[int, ...] = (7, 13, 3)
"""Ragged prompt lengths; every scenario covers every position of every prompt once."""

FP32_ATOL = devices.TOLERANCES[torch.float32]["atol"]
"""fp32 logits (of order one) must match transformers to this absolute error (1e-4)."""

# ---------------------------------------------------------------------------------------------
# Model specs: one tiny Hugging Face config per architecture and variant.
# ---------------------------------------------------------------------------------------------

TINY: dict[str, Any] = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 128,
    "max_position_embeddings": 128,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
}


@dataclass(frozen=True)
class ModelSpec:
    """A named tiny model: its config class, the overrides on `TINY`, and what it exercises."""

    name: str
    config_cls: type[PreTrainedConfig]
    architecture: str
    overrides: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def hf_config(self, **extra: Any) -> PreTrainedConfig:
        return self.config_cls(**{**TINY, **self.overrides, **extra, "architectures": [self.architecture]})


MOE = {"num_experts_per_tok": 2, "moe_intermediate_size": 32}

GEMMA = {
    "head_dim": 32,
    "query_pre_attn_scalar": 24,
    "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
    "num_hidden_layers": 3,
    "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh",
}
"""Windows shorter than the prompts, a query scale other than head_dim's, tied embeddings."""

MODEL_SPECS: tuple[ModelSpec, ...] = (
    ModelSpec("llama", LlamaConfig, "LlamaForCausalLM", note="untied embeddings"),
    ModelSpec("llama-tied", LlamaConfig, "LlamaForCausalLM", {"tie_word_embeddings": True}),
    ModelSpec(
        "llama-rope-llama3",
        LlamaConfig,
        "LlamaForCausalLM",
        {
            "rope_parameters": {
                "rope_type": "llama3",
                "rope_theta": 10000.0,
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                # With head_dim 16 the wavelengths are 6.3, 19.9, 62.8, 199, ...: one is kept, two
                # are interpolated and the rest divided by `factor`, so every branch is covered.
                "original_max_position_embeddings": 64,
            }
        },
    ),
    ModelSpec(
        "llama-rope-linear",
        LlamaConfig,
        "LlamaForCausalLM",
        {"rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}},
    ),
    ModelSpec(
        "llama-rope-dynamic",
        LlamaConfig,
        "LlamaForCausalLM",
        {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}},
        note=(
            "every sequence stays within max_position_embeddings, where transformers' dynamic NTK "
            "equals the unscaled rotary (it rescales only past that length, and then with one base "
            "for the whole prompt, while we scale per position); so this checks the config path "
            "and that no scaling leaks in below the original context"
        ),
    ),
    ModelSpec("mistral-window4", MistralConfig, "MistralForCausalLM", {"sliding_window": 4}),
    ModelSpec("qwen2-bias", Qwen2Config, "Qwen2ForCausalLM", note="q/k/v biases"),
    ModelSpec(
        "qwen2-window-layer1",
        Qwen2Config,
        "Qwen2ForCausalLM",
        {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1},
        note="layer 0 full attention, layer 1 sliding window (layer_types)",
    ),
    ModelSpec("qwen3-qknorm", Qwen3Config, "Qwen3ForCausalLM", {"head_dim": 32}, note="q/k norm, head_dim != H/heads"),
    # Real models' attention shapes on a tiny body: head dim 128 with GQA group 7 (Qwen2.5-7B's
    # 28/4), head dim 256 with group 5 (vendor decode kernels dispatch on both).
    ModelSpec(
        "qwen3-gqa7-d128",
        Qwen3Config,
        "Qwen3ForCausalLM",
        {"num_attention_heads": 7, "num_key_value_heads": 1, "head_dim": 128},
        note="head dim 128, GQA group 7",
    ),
    ModelSpec(
        "llama-gqa5-d256",
        LlamaConfig,
        "LlamaForCausalLM",
        {"hidden_size": 80, "num_attention_heads": 5, "num_key_value_heads": 1, "head_dim": 256},
        note="head dim 256, GQA group 5",
    ),
    ModelSpec("mixtral", MixtralConfig, "MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    ModelSpec(
        "qwen2-moe-shared",
        Qwen2MoeConfig,
        "Qwen2MoeForCausalLM",
        {**MOE, "num_experts": 4, "shared_expert_intermediate_size": 48, "norm_topk_prob": False},
    ),
    ModelSpec(
        "qwen3-moe",
        Qwen3MoeConfig,
        "Qwen3MoeForCausalLM",
        {**MOE, "num_experts": 4, "norm_topk_prob": True, "mlp_only_layers": [1]},
        note="layer 1 is a dense MLP (mlp_only_layers)",
    ),
    ModelSpec(
        "gemma2-softcap",
        Gemma2Config,
        "Gemma2ForCausalLM",
        {**GEMMA, "attn_logit_softcapping": 2.0, "final_logit_softcapping": 3.0},
        note="sliding/global layers, attention and final soft-caps small enough to bind",
    ),
    ModelSpec(
        "gemma3-local-rope",
        Gemma3TextConfig,
        "Gemma3ForCausalLM",
        {
            **GEMMA,
            "rope_parameters": {
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0},
                "full_attention": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
            },
        },
        note="q/k norm, sliding layers on their own rotary base, linear scaling on global layers",
    ),
    ModelSpec(
        "phi3-longrope",
        Phi3Config,
        "Phi3ForCausalLM",
        {
            "original_max_position_embeddings": 32,
            **{"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},  # defaults lie past the tiny vocabulary
            "rope_parameters": {
                "rope_type": "longrope",
                "rope_theta": 10000.0,
                "partial_rotary_factor": 0.5,
                "short_factor": [1.0, 1.5, 2.5, 4.0],
                "long_factor": [2.0, 3.0, 4.0, 8.0],
            },
        },
        note=(
            "fused qkv and gate_up tensors, half the head rotated, longrope's short factors and "
            "attention factor (prompts stay within the original context: transformers switches "
            "to the long factors for a whole forward, we per position)"
        ),
    ),
    ModelSpec(
        "glm4-moe-grouped",
        Glm4MoeConfig,
        "Glm4MoeForCausalLM",
        {
            **MOE,
            "num_hidden_layers": 3,
            "n_routed_experts": 8,
            "n_group": 4,
            "topk_group": 2,
            "n_shared_experts": 1,
            "first_k_dense_replace": 1,
            "routed_scaling_factor": 2.5,
            "attention_bias": True,
            "use_qk_norm": True,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
            **{"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        },
        note="grouped sigmoid routing with a selection bias, a shared expert, layer 0 dense, half rotary",
    ),
)

DEEPSEEK = {
    **MOE,
    "num_hidden_layers": 3,
    "num_key_value_heads": 4,
    "kv_lora_rank": 32,
    "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8,
    "v_head_dim": 24,
    "n_routed_experts": 8,
    "n_group": 4,
    "topk_group": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "routed_scaling_factor": 2.0,
    "rope_parameters": {
        "rope_type": "yarn",
        "rope_theta": 10000.0,
        "factor": 4.0,
        "original_max_position_embeddings": 32,
        "mscale": 1.0,
        "mscale_all_dim": 0.8,
        "beta_fast": 8,
        "beta_slow": 1,
    },
}
"""MLA with value and key head dims that differ, yarn with both mscales, experts after one dense
layer with a shared expert and grouped routing (4 groups of 2, the best 2 searched)."""

MODEL_SPECS += (
    ModelSpec(
        "deepseek-v2-mla",
        DeepseekV2Config,
        "DeepseekV2ForCausalLM",
        {**DEEPSEEK, "q_lora_rank": None, "topk_method": "group_limited_greedy", "topk_group": 1},
        # With one group searched the top-2 must share a group: unlike plain greedy top-2.
        note="MLA without a query bottleneck, group-limited greedy softmax routing, scaled",
    ),
    ModelSpec(
        "deepseek-v3-mla",
        DeepseekV3Config,
        "DeepseekV3ForCausalLM",
        {
            **DEEPSEEK,
            "q_lora_rank": 24,
            "norm_topk_prob": True,
            **{"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2},
        },
        note="MLA with a query bottleneck, noaux_tc grouped sigmoid routing with the selection bias",
    ),
)

MODEL_SPECS += (
    ModelSpec(
        "gpt-oss-sinks",
        GptOssConfig,
        "GptOssForCausalLM",
        {
            "num_hidden_layers": 3,
            "head_dim": 16,
            "intermediate_size": 32,
            "num_local_experts": 4,
            "num_experts_per_tok": 2,
            "sliding_window": 4,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 150000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 32,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "truncate": False,
            },
        },
        note=(
            "sinks on every head, sliding/global layers alternating (windows shorter than the prompts), "
            "biased router and experts with the clamped SwiGLU, q/k/v/o biases, untruncated yarn"
        ),
    ),
)

SPECS_BY_NAME: dict[str, ModelSpec] = {spec.name: spec for spec in MODEL_SPECS}


def randomize_(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Re-initializes every parameter so that nothing is trivially zero or one.

    transformers initializes norms to one, biases to zero and matrices with std 0.02, under
    which attention is nearly uniform and a dropped bias, norm weight or mask barely moves the
    logits. Here matrices get std `1/sqrt(fan_in)` (attention is peaked, logits of order one),
    norm weights `1 + 0.2 N(0, 1)` and biases `0.2 N(0, 1)`, as are MoE routers' selection
    biases (`e_score_correction_bias`, a buffer in transformers); attention sinks (gpt-oss)
    `N(0, 1)`, comparable to the scores they compete with.
    """
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("correction_bias"):
                buffer.copy_(0.2 * torch.randn(buffer.shape, generator=generator))
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if "norm" in name:
                param.copy_(1.0 + 0.2 * noise)
            elif name.endswith("bias"):
                param.copy_(0.2 * noise)
            elif name.endswith("sinks"):
                param.copy_(noise)
            else:
                param.copy_(noise / param.shape[-1] ** 0.5)


def make_prompts(vocab_size: int, seed: int = 1234) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator) for n in PROMPT_LENS]


@torch.no_grad()
def hf_logits(model: torch.nn.Module, prompts: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """transformers' full-sequence float32 logits `[L, V]` of each prompt, one at a time."""
    return [model(prompt[None]).logits[0].float() for prompt in prompts]


@dataclass
class Checkpoint:
    """A tiny random model saved by transformers, and its reference logits on `prompts`."""

    spec: ModelSpec
    path: Path
    hf_model: torch.nn.Module
    config: ModelConfig
    weights: dict[str, torch.Tensor]
    prompts: list[torch.Tensor]
    reference: list[torch.Tensor]
    _bf16_reference: list[torch.Tensor] | None = None

    def bf16_reference(self) -> list[torch.Tensor]:
        """transformers' logits with the same weights run in bfloat16 (a yardstick for rounding)."""
        if self._bf16_reference is None:
            hf_bf16 = AutoModelForCausalLM.from_pretrained(self.path, dtype=torch.bfloat16, attn_implementation="eager")
            self._bf16_reference = hf_logits(hf_bf16.eval(), self.prompts)
        return self._bf16_reference


def build_checkpoint(spec: ModelSpec, directory: Path, seed: int = 0) -> Checkpoint:
    """Creates `spec`'s model with transformers, randomizes it, saves it and reloads the config
    and safetensors the way a serving process would."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    hf_model = AutoModelForCausalLM.from_config(spec.hf_config(), attn_implementation="eager").eval()
    randomize_(hf_model, generator)
    hf_model.save_pretrained(directory)
    raw = json.loads((directory / "config.json").read_text())
    weights: dict[str, torch.Tensor] = {}
    for file in sorted(directory.glob("*.safetensors")):
        weights.update(load_file(file))
    config = ModelConfig.from_dict(raw)
    prompts = make_prompts(config.vocab_size)
    return Checkpoint(spec, directory, hf_model, config, weights, prompts, hf_logits(hf_model, prompts))


class CheckpointStore:
    """Builds each spec's checkpoint once per session, on first use."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._built: dict[str, Checkpoint] = {}

    def get(self, name: str) -> Checkpoint:
        if name not in self._built:
            directory = self.root / name
            directory.mkdir(parents=True, exist_ok=True)
            self._built[name] = build_checkpoint(SPECS_BY_NAME[name], directory)
        return self._built[name]


# ---------------------------------------------------------------------------------------------
# Targets: a platform's ops bound (natively or forced to the references) for one test.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TargetSpec:
    platform: str
    force_reference: bool = False

    @property
    def id(self) -> str:
        return f"{self.platform}-reference" if self.force_reference else self.platform


@dataclass
class Target:
    spec: TargetSpec
    platform: Platform
    device: torch.device
    table: OpTable | None = None
    """What was bound for the model last loaded on this target (`load_model`)."""

    def bind_for(self, config: ModelConfig, dtype: torch.dtype) -> OpTable:
        """Selects and binds the platform's kernels for this model, as the server does."""
        facts = ModelFacts(
            dtype=dtype,
            head_dim=config.attention_head_dim,
            num_heads=config.num_heads,
            num_kv_heads=config.attention_kv_heads,
            features=config.op_features,
        )
        self.table = self.platform.bind_ops(facts, force_reference=self.spec.force_reference)
        return self.table


def target_params() -> list[Any]:
    """The shared device parameters (unavailable devices skipped with their reason), each as a
    native target, plus cpu with every op forced to its reference implementation when cpu is
    among the selected devices and no family override narrows the run to one family."""
    params = [pytest.param(TargetSpec(p.values[0]), id=p.id, marks=p.marks) for p in devices.device_params()]
    if "cpu" in devices.selected_devices() and devices.families_override() is None:
        reference = TargetSpec("cpu", force_reference=True)
        params.append(pytest.param(reference, id=reference.id))
    return params


@contextlib.contextmanager
def bound_ops(spec: TargetSpec) -> Iterator[Target]:
    """A target for `spec` whose bindings (made by `load_model`) are undone on exit."""
    saved = snapshot()
    platform = devices.platform(spec.platform)
    try:
        yield Target(spec, platform, platform.device())
    finally:
        restore(saved)


# ---------------------------------------------------------------------------------------------
# Running our model over a paged KV cache.
# ---------------------------------------------------------------------------------------------

Chunk = tuple[int, int, int]
"""(sequence index, first position, end position) of the tokens one step feeds for a sequence."""
Schedule = list[list[Chunk]]


def load_model(checkpoint: Checkpoint, dtype: torch.dtype, target: Target | torch.device) -> DecoderForCausalLM:
    """Builds the checkpoint's model on the target's device; for a `Target`, the platform's
    kernels are first selected and bound for this model's shapes and dtype."""
    if isinstance(target, Target):
        target.bind_for(checkpoint.config, dtype)
    device = target.device if isinstance(target, Target) else target
    model = model_class_for(checkpoint.config)(checkpoint.config, dtype)
    model.load_weights(checkpoint.weights.items())
    return model.to(device).eval()


class PagedRunner:
    """Feeds sequences to our model step by step; each sequence's KV slots are drawn from a
    shuffled pool, so they are non-contiguous and interleaved with other sequences'."""

    def __init__(self, model: DecoderForCausalLM, device: torch.device, num_slots: int = 96, seed: int = 7) -> None:
        config = model.config
        self.model = model
        self.device = device
        self.backend = model.build_attention_backend(device)  # this rank's heads under tensor parallelism
        shape = self.backend.kv_buffer_shape(num_slots)
        self.kv_buffers = [torch.zeros(shape, dtype=model.dtype, device=device) for _ in range(config.num_layers)]
        self.free_slots = torch.randperm(num_slots, generator=torch.Generator().manual_seed(seed)).tolist()
        self.slots: dict[int, list[int]] = {}

    def step(self, prompts: Sequence[torch.Tensor], chunks: Sequence[Chunk]) -> list[torch.Tensor]:
        """Runs one step; returns each chunk's float32 logits `[end - start, V]` on the host."""
        seq_lens, extend_lens, kv_slots, ids, positions = [], [], [], [], []
        for seq, start, end in chunks:
            slots = self.slots.setdefault(seq, [])
            assert start == len(slots) and end > start, f"chunk {(seq, start, end)} does not extend sequence {seq}"
            slots.extend(self.free_slots.pop() for _ in range(end - start))
            seq_lens.append(end)
            extend_lens.append(end - start)
            kv_slots.extend(slots)
            ids.append(prompts[seq][start:end])
            positions.append(torch.arange(start, end))
        inputs = ops.AttentionInputs(
            tuple(seq_lens), tuple(extend_lens), torch.tensor(kv_slots, dtype=torch.long, device=self.device)
        )
        ctx = ForwardContext(self.backend, self.backend.plan(inputs), self.kv_buffers)
        with torch.no_grad():
            hidden = self.model(torch.cat(ids).to(self.device), torch.cat(positions).to(self.device), ctx)
            logits = self.model.compute_logits(hidden)
        self.kv_buffers = ctx.kv_buffers
        assert logits.dtype == torch.float32
        return list(logits.cpu().split(extend_lens))


def run_schedule(
    model: DecoderForCausalLM, device: torch.device, prompts: Sequence[torch.Tensor], schedule: Schedule
) -> list[torch.Tensor]:
    """Our logits for every position of every prompt, assembled from the schedule's steps."""
    runner = PagedRunner(model, device)
    rows: list[dict[int, torch.Tensor]] = [{} for _ in prompts]
    for chunks in schedule:
        for (seq, start, _), logits in zip(chunks, runner.step(prompts, chunks), strict=True):
            for offset, row in enumerate(logits):
                rows[seq][start + offset] = row
    for seq, prompt in enumerate(prompts):
        assert sorted(rows[seq]) == list(range(len(prompt))), f"schedule does not cover sequence {seq}"
    return [torch.stack([rows[seq][p] for p in range(len(prompt))]) for seq, prompt in enumerate(prompts)]


def extend_schedule(lens: Sequence[int]) -> Schedule:
    """(a) every prompt prefilled in one batch."""
    return [[(seq, 0, n) for seq, n in enumerate(lens)]]


def decode_schedule(lens: Sequence[int], prefix_lens: Sequence[int]) -> Schedule:
    """(b) prefixes prefilled together, then one token per live sequence per step; sequences
    finish at different steps, so the decode batch shrinks (ragged)."""
    schedule: Schedule = [[(seq, 0, p) for seq, p in enumerate(prefix_lens)]]
    for pos in range(min(prefix_lens), max(lens)):
        step = [(seq, pos, pos + 1) for seq, (n, p) in enumerate(zip(lens, prefix_lens)) if p <= pos < n]
        if step:
            schedule.append(step)
    return schedule


def cached_prefix_schedule(lens: Sequence[int], prefix_lens: Sequence[int]) -> Schedule:
    """(c) prefixes prefilled, then the rest of every prompt extended at once over its cached prefix."""
    return [
        [(seq, 0, p) for seq, p in enumerate(prefix_lens)],
        [(seq, p, n) for seq, (n, p) in enumerate(zip(lens, prefix_lens)) if n > p],
    ]


def mixed_schedule(lens: Sequence[int]) -> Schedule:
    """(c) mixed batches: decodes next to a fresh prefill and an extend over a cached prefix."""
    a, b, c = lens
    assert a >= 7 and b >= 10 and c >= 2, "mixed schedule needs prompts of lengths >= (7, 10, 2)"
    return [
        [(0, 0, 5), (2, 0, 1)],
        [(0, 5, 6), (1, 0, 8), (2, 1, c)],  # decode | fresh prefill | extend over a cached prefix
        [(1, 8, 9), (0, 6, 7)],  # two decodes, listed out of sequence order
        [(1, 9, b), *([(0, 7, a)] if a > 7 else [])],
    ]


PREFIX_LENS: tuple[int, ...] = (4, 6, 1)

SCHEDULES: dict[str, Callable[[], Schedule]] = {
    "extend": lambda: extend_schedule(PROMPT_LENS),
    "decode": lambda: decode_schedule(PROMPT_LENS, PREFIX_LENS),
    "cached-prefix": lambda: cached_prefix_schedule(PROMPT_LENS, PREFIX_LENS),
    "mixed": lambda: mixed_schedule(PROMPT_LENS),
}


GREEDY_TOKENS = 8


@torch.no_grad()
def hf_greedy(model: torch.nn.Module, prompt: torch.Tensor, n: int = GREEDY_TOKENS) -> list[int]:
    """transformers' greedy continuation, one full forward per token (no cache, no stop token)."""
    sequence = prompt
    for _ in range(n):
        token = model(sequence[None]).logits[0, -1].argmax()
        sequence = torch.cat([sequence, token[None]])
    return sequence[len(prompt) :].tolist()


def greedy(model: DecoderForCausalLM, device: torch.device, prompt: torch.Tensor, n: int = GREEDY_TOKENS) -> list[int]:
    """Our greedy continuation: one prefill step, then one decode step per token, over the paged cache."""
    runner = PagedRunner(model, device)
    sequence = [prompt]
    chunk = (0, 0, len(prompt))
    for _ in range(n):
        token = runner.step(sequence, [chunk])[0][-1].argmax()
        sequence = [torch.cat([sequence[0], token[None]])]
        chunk = (0, chunk[2], chunk[2] + 1)
    return sequence[0][len(prompt) :].tolist()


def max_abs_error(ours: Sequence[torch.Tensor], reference: Sequence[torch.Tensor]) -> float:
    assert [o.shape for o in ours] == [r.shape for r in reference]
    return max((o.float() - r.float()).abs().max().item() for o, r in zip(ours, reference))
