"""Conformance suite 2, model parity: our logits vs transformers on tiny random-weight models.

For every supported architecture (and rope-scaling, tied-embedding, sliding-window and MoE
variants) a model is generated with transformers at test time, saved, loaded into our runtime
from its safetensors, and run over a paged KV cache with shuffled slots in four schedules:
one prefill batch, prefill-then-ragged-decode, extend over a cached prefix, and mixed batches.
Every logit row must equal transformers' full-sequence forward at that position. Each case runs
on every available platform (others are skipped with their reason) and once on cpu with every
op forced to its reference implementation.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from sglang import ops
from sglang.ci.suites import devices
from sglang.ci.suites.devices import require_dtype, triton_interpreted
from sglang.ci.suites.model_harness import (
    DEEPSEEK,
    FP32_ATOL,
    MODEL_SPECS,
    SCHEDULES,
    CheckpointStore,
    PagedRunner,
    Target,
    TargetSpec,
    bound_ops,
    greedy,
    hf_greedy,
    hf_logits,
    load_model,
    max_abs_error,
    run_schedule,
    target_params,
)
from sglang.ops.attention import ReferenceAttention
from sglang.ops.binding import resolve, snapshot
from sglang.platforms.tpu.backend import xla_cpu_requested

TARGETS = target_params()
INTERPRETED_SPECS = ("llama", "qwen3-moe", "gemma2-softcap", "gpt-oss-sinks")
"""Under Triton's interpreter (slow): one dense, one MoE, windowed soft-capped layers, and windowed
layers with sinks and biased experts with the clamped SwiGLU (the Triton attention and MoE serve
them)."""
INTERPRETED_SLOW_SPECS = ("deepseek-v3-mla",)
"""Under Triton's interpreter in the slow run only: MLA through the Triton MLA decode kernel (its
op parity runs by default)."""
SPEC_NAMES = (
    [*INTERPRETED_SPECS, *INTERPRETED_SLOW_SPECS] if triton_interpreted() else [spec.name for spec in MODEL_SPECS]
)
BF16_SPECS = ("llama", "qwen3-qknorm", "gemma2-softcap")
REAL_SHAPE_SPECS = ("qwen3-gqa7-d128", "llama-gqa5-d256")
"""Real models' head dims and GQA groups. Not on XLA:CPU, which compiles every step shape anew
(about a minute per case on the CI machine); there op parity covers these shapes for the jax
family, and a TPU runs them."""
QUICK_SCHEDULE_SPECS = ("gemma2-softcap", "gemma3-local-rope", "phi3-longrope", "glm4-moe-grouped")
"""Specs whose `extend` and `cached-prefix` schedules are `slow` (CI budget): `mixed` holds a fresh
prefill, an extend over a cached prefix and decodes, and `decode` ragged decoding, by default."""
MIXED_ONLY_SPECS = ("deepseek-v2-mla", "deepseek-v3-mla", "gpt-oss-sinks")
"""Specs whose schedules but `mixed` are `slow`: MLA's decode batching is covered by op parity and
by greedy generation (decode steps after a prefill) by default."""
XLA_CPU_ROW = "tpu" in devices.selected_devices() and xla_cpu_requested()
"""On XLA:CPU every step shape compiles anew (seconds each), so there every spec runs only its
`mixed` schedule by default; `tests/tpu/test_jit_step.py` checks each spec's prefill and decode
logits on the jitted steps the tpu platform serves with."""


def spec_schedules(specs: list[str] | tuple[str, ...]) -> list:
    """(spec, schedule) parameters, the ones `QUICK_SCHEDULE_SPECS` leave to the slow run marked so."""
    return [
        pytest.param(
            spec,
            schedule,
            id=f"{spec}-{schedule}",
            marks=pytest.mark.slow
            if (spec in QUICK_SCHEDULE_SPECS and schedule not in ("decode", "mixed"))
            or ((spec in MIXED_ONLY_SPECS or XLA_CPU_ROW) and schedule != "mixed")
            or spec in INTERPRETED_SLOW_SPECS
            else (),
        )
        for spec in specs
        for schedule in sorted(SCHEDULES)
    ]


@pytest.mark.parametrize("target", TARGETS, indirect=True)
def test_binding_matches_target(target: Target, checkpoints: CheckpointStore) -> None:
    """The native run really uses the platform's chosen kernels and the reference run does not."""
    load_model(checkpoints.get("llama"), torch.float32, target)
    for choice in target.table.choices:
        expected = resolve(choice.chosen.qualname)
        bound = getattr(ops, choice.op)
        assert getattr(bound, "func", bound) is expected, choice.op
    if target.spec.force_reference:
        assert not any(c.native for c in target.table.choices)
        assert ops.attention_backend is ReferenceAttention
    else:
        families = {c.chosen.family for c in target.table.choices}
        assert families - {"reference"} <= set(target.platform.kernel_families)


def test_bound_ops_restores_previous_binding(checkpoints: CheckpointStore) -> None:
    before = snapshot()
    with bound_ops(TargetSpec("cpu", force_reference=True)) as target:
        load_model(checkpoints.get("llama"), torch.float32, target)
        assert ops.attention_backend is ReferenceAttention
    assert snapshot() == before


@pytest.mark.parametrize(("spec", "schedule"), spec_schedules(SPEC_NAMES))
@pytest.mark.parametrize("target", TARGETS, indirect=True)
def test_fp32_logits_match_transformers(target: Target, spec: str, schedule: str, checkpoints: CheckpointStore) -> None:
    require_dtype(target.platform, torch.float32)
    if spec in REAL_SHAPE_SPECS and target.platform.name == "tpu" and xla_cpu_requested():
        pytest.skip("XLA:CPU compiles every step shape anew: real-shape models run on a TPU only")
    checkpoint = checkpoints.get(spec)
    model = load_model(checkpoint, torch.float32, target)
    ours = run_schedule(model, target.device, checkpoint.prompts, SCHEDULES[schedule]())
    error = max_abs_error(ours, checkpoint.reference)
    assert error <= FP32_ATOL, f"{spec} [{schedule}] on {target.spec.id}: max abs logit error {error:.3g}"


@pytest.mark.parametrize(("spec", "schedule"), spec_schedules(BF16_SPECS))
@pytest.mark.parametrize("target", TARGETS, indirect=True)
def test_bf16_logits_match_transformers(target: Target, spec: str, schedule: str, checkpoints: CheckpointStore) -> None:
    """bf16 weights and activations: compared with transformers in fp32, allowing a few times the
    error transformers itself makes when run in bf16 on the same weights."""
    require_dtype(target.platform, torch.bfloat16)
    if triton_interpreted():
        pytest.skip("the Triton interpreter computes bf16 wrongly; bf16 is checked on a GPU only")
    checkpoint = checkpoints.get(spec)
    model = load_model(checkpoint, torch.bfloat16, target)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    ours = run_schedule(model, target.device, checkpoint.prompts, SCHEDULES[schedule]())
    hf_bf16_error = max_abs_error(checkpoint.bf16_reference(), checkpoint.reference)
    tolerance = max(3 * hf_bf16_error, 0.05)
    error = max_abs_error(ours, checkpoint.reference)
    assert error <= tolerance, (
        f"{spec} [{schedule}] bf16 on {target.spec.id}: max abs logit error {error:.3g} "
        f"(transformers in bf16: {hf_bf16_error:.3g}; tolerance {tolerance:.3g})"
    )


GREEDY_SPECS = (
    "gemma2-softcap",
    "gemma3-local-rope",
    "phi3-longrope",
    "glm4-moe-grouped",
    "deepseek-v3-mla",
    "deepseek-v2-mla",
    "gpt-oss-sinks",
)
"""Architectures whose greedy text is checked on every target (so it is identical across them)."""
SLOW_GREEDY_SPECS = ("deepseek-v2-mla", *INTERPRETED_SLOW_SPECS)
"""Left to the slow run (CI budget): DeepSeek-V3 covers MLA decoding by default."""
EMULATED_SLOW_GREEDY_SPECS = ("gpt-oss-sinks",) if triton_interpreted() or XLA_CPU_ROW else ()
"""Slow where every decode step is emulated (Triton's interpreter, a fresh XLA:CPU compile per
shape): there the `mixed` schedule covers sinks and biased experts by default."""


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(s, marks=pytest.mark.slow if s in (*SLOW_GREEDY_SPECS, *EMULATED_SLOW_GREEDY_SPECS) else ())
        for s in GREEDY_SPECS
        if s in SPEC_NAMES
    ],
)
@pytest.mark.parametrize("target", TARGETS, indirect=True)
def test_greedy_generation_matches_transformers(target: Target, spec: str, checkpoints: CheckpointStore) -> None:
    """A prefill then decode steps, each token the argmax of the last: the same tokens as
    transformers' greedy decoding, continuing the longest prompt past every window."""
    require_dtype(target.platform, torch.float32)
    checkpoint = checkpoints.get(spec)
    model = load_model(checkpoint, torch.float32, target)
    prompt = max(checkpoint.prompts, key=len)
    assert greedy(model, target.device, prompt) == hf_greedy(checkpoint.hf_model, prompt), f"{spec} on {target.spec.id}"


def test_reference_logits_are_informative(checkpoints: CheckpointStore) -> None:
    """The fp32 tolerance means something only if logits are of order one and differ across
    positions (random weights that are too small would make every model look alike)."""
    for spec in SPEC_NAMES:
        reference = torch.cat(checkpoints.get(spec).reference)
        assert reference.std() > 0.3, spec
        assert (reference[1:] - reference[:-1]).abs().max() > 0.5, spec


VARIANT_BASELINES: dict[str, tuple[str, dict, bool]] = {
    # case: (spec, config overrides that remove the variant, whether the logits must change)
    "llama-rope-llama3": (
        "llama-rope-llama3",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        True,
    ),
    "llama-rope-linear": (
        "llama-rope-linear",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        True,
    ),
    # Within max_position_embeddings transformers' dynamic NTK is the plain rotary: documented here.
    "llama-rope-dynamic": (
        "llama-rope-dynamic",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}},
        False,
    ),
    "mistral-window4": ("mistral-window4", {"sliding_window": None}, True),
    "qwen2-window-layer1": ("qwen2-window-layer1", {"use_sliding_window": False}, True),
    "qwen2-moe-shared": ("qwen2-moe-shared", {"norm_topk_prob": True}, True),
    "qwen3-moe": ("qwen3-moe", {"norm_topk_prob": False}, True),
    "gemma2-softcap": ("gemma2-softcap", {"attn_logit_softcapping": None, "final_logit_softcapping": None}, True),
    "gemma2-window": ("gemma2-softcap", {"layer_types": ["full_attention"] * 3}, True),
    "gemma3-local-rope": (
        "gemma3-local-rope",
        {
            "rope_parameters": {
                t: {"rope_type": "default", "rope_theta": 10000.0} for t in ("sliding_attention", "full_attention")
            }
        },
        True,
    ),
    "gemma3-window": ("gemma3-local-rope", {"layer_types": ["full_attention"] * 3}, True),
    "glm4-moe-groups": ("glm4-moe-grouped", {"n_group": 1, "topk_group": 1}, True),
    "glm4-moe-scaling": ("glm4-moe-grouped", {"routed_scaling_factor": 1.0}, True),
    "gpt-oss-window": ("gpt-oss-sinks", {"layer_types": ["full_attention"] * 3}, True),
    "deepseek-v2-yarn": ("deepseek-v2-mla", {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}, True),
    "deepseek-v2-group-limited": ("deepseek-v2-mla", {"topk_method": "greedy"}, True),
    "deepseek-v3-mscale": (
        "deepseek-v3-mla",
        {"rope_parameters": {**DEEPSEEK["rope_parameters"], "mscale_all_dim": 0.0}},
        True,
    ),
    "deepseek-v3-groups": ("deepseek-v3-mla", {"n_group": 1, "topk_group": 1}, True),
    "phi3-longrope": (
        "phi3-longrope",
        {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5}},
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(VARIANT_BASELINES))
def test_variant_is_exercised(case: str, checkpoints: CheckpointStore) -> None:
    """The prompts are long enough for each variant (window, rope scaling, top-k normalization,
    soft-capping) to change transformers' logits, so parity above really covers it."""
    spec, overrides, must_change = VARIANT_BASELINES[case]
    checkpoint = checkpoints.get(spec)
    baseline = AutoModelForCausalLM.from_config(checkpoint.spec.hf_config(**overrides), attn_implementation="eager")
    baseline.load_state_dict(checkpoint.hf_model.state_dict())
    difference = max_abs_error(hf_logits(baseline.eval(), checkpoint.prompts), checkpoint.reference)
    if must_change:
        assert difference > 0.05, f"{case}: the variant changes logits by only {difference:.3g}"
    else:
        assert difference < 1e-5, f"{case}: expected no change within the original context, got {difference:.3g}"


def test_sinks_are_exercised(checkpoints: CheckpointStore) -> None:
    """Dropping gpt-oss's sinks (a logit of -inf) changes transformers' logits, so parity above
    really covers them (sinks are weights, not a config switch `test_variant_is_exercised` flips)."""
    checkpoint = checkpoints.get("gpt-oss-sinks")
    sinkless = copy.deepcopy(checkpoint.hf_model)
    with torch.no_grad():
        for layer in sinkless.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
    assert max_abs_error(hf_logits(sinkless, checkpoint.prompts), checkpoint.reference) > 0.05


def test_runner_slots_are_non_contiguous(checkpoints: CheckpointStore) -> None:
    """The paged runner really scatters each sequence over shuffled, interleaved slots."""
    checkpoint = checkpoints.get("llama")
    with bound_ops(TargetSpec("cpu")) as target:
        runner = PagedRunner(load_model(checkpoint, torch.float32, target), target.device)
        for chunks in SCHEDULES["decode"]():
            runner.step(checkpoint.prompts, chunks)
    for seq, slots in runner.slots.items():
        assert len(slots) == len(checkpoint.prompts[seq])
        assert slots != list(range(slots[0], slots[0] + len(slots))), f"sequence {seq} got contiguous slots"
    assert len({s for slots in runner.slots.values() for s in slots}) == sum(len(p) for p in checkpoint.prompts)
