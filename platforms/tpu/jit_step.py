"""The tpu platform's steps: one jitted JAX function per padded batch shape, over donated KV.

The torch decoder is traced, unchanged, by torchax into a JAX function of (weights, KV buffers,
token ids, positions, the ragged attention contract, logit rows): `torch.func.functional_call`
substitutes the weights, held as JAX arrays. Each distinct `StepShape` is lowered and compiled
once (ahead of time, so its compile time is measured and a failure is confined to that shape);
JAX's persistent compilation cache makes a second start skip XLA's compile.

Shapes are padded to buckets so compilations stay few: sequences to the runner's `BucketPolicy`
(the one graph capture and compiled decode use), tokens, KV pages and logit rows to powers of
two. Padded tokens are token 0 at position 0 of no sequence; the attention kernel writes their
K/V into page 0 (the padding page) and their logits are never returned.

LoRA: the adapter slots are module buffers, hence step arguments like every weight, and the rows'
slots (`StepInputs.lora_slots`, padded rows in slot 0, the base model's) are one more argument:
loading or evicting an adapter changes argument values, never a compiled shape, and a batch's mix
of adapters is data. A step whose rows all use the base model runs the shape compiled without
LoRA (slot 0 adds exactly nothing), as the captured runner does.

Invariants: the KV buffers passed to a step are donated (invalid afterwards) and replaced by the
ones it returns; a shape that failed to compile fails again at once, never recompiles. The
weights a step reads are those of the model's `weights_version` at that step (`StepModel`):
buffers are copied, never aliased, since torch rewrites them in place and a JAX array must not
change under a compiled step (on XLA:CPU an alias would also hide a missed re-read that a TPU,
whose arrays are copies, would show); parameters are never rewritten, so are shared zero-copy
where the device allows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from sglang.ops.attention import AttentionBackend, AttentionInputs
from sglang.ops.buckets import BucketPolicy
from sglang.ops.quant import QuantizedWeight
from sglang.ops.step import ForwardContext, StepError, StepInputs, StepModel, StepOutput, StepStats
from sglang.platforms.base import PlatformError
from sglang.platforms.kernels.jax.attention import RaggedShape, pack_contract
from sglang.platforms.tpu.backend import enable_persistent_cache, xla_cpu_requested
from sglang.platforms.tpu.torchax_compat import import_torchax

logger = logging.getLogger(__name__)

TOKEN_BUCKETS = BucketPolicy(tuple(2**i for i in range(4, 15)))
"""Tokens of a step with prefill rows (16 .. 16384); a pure decode step has one per sequence."""
MIN_KV_TOKENS = 256
"""Every sequence's KV pages cover at least this many tokens: short sequences share one shape."""
DEFAULT_SEQ_BUCKETS = BucketPolicy.up_to(64)


def bucket(policy: BucketPolicy, n: int) -> int:
    """The policy's bucket for `n`, or the next power of two past its largest."""
    return policy.bucket_for(n) or 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class StepShape:
    tokens: int
    ragged: RaggedShape
    rows: int
    lora: bool = False
    """Rows read LoRA slots (some row uses an adapter)."""

    def __str__(self) -> str:
        r = self.ragged
        text = f"tokens={self.tokens} seqs={r.num_seqs} pages/seq={r.pages_per_seq} q={r.max_q_len} rows={self.rows}"
        return f"{text} lora" if self.lora else text


@dataclass(frozen=True)
class CompileRecord:
    shape: StepShape
    trace_s: float
    compile_s: float
    error: str | None = None


class _Step(nn.Module):
    """The model's forward and logits as one module call, so `functional_call` covers both."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids, positions, ctx: ForwardContext, rows) -> torch.Tensor:
        return self.model.compute_logits(self.model(ids, positions, ctx)[rows])


class JitStepRunner:
    """The tpu platform's `StepRunner`: every step, prefill or decode, is a compiled function."""

    def __init__(self, model: StepModel, backend: AttentionBackend, buckets: BucketPolicy | None, label: str) -> None:
        import jax

        if not callable(getattr(backend, "metadata", None)):
            raise PlatformError(
                f"{label}: jitted steps need an attention backend that builds its metadata inside the "
                f"step (the jax family's); {type(backend).__name__} does not (it is chosen when the ops "
                "are forced to their references, or the model needs a feature the jax attention lacks: "
                "`sglang ops` says which)"
            )
        self.torchax = import_torchax()
        self.cache_dir = enable_persistent_cache()
        self.label = label
        self.backend = backend
        self.page_size = backend.page_size
        self.seq_buckets = buckets or DEFAULT_SEQ_BUCKETS
        self.model = model
        self.step_module = _Step(model)
        self.device = jax.devices()[0]
        self.stats = StepStats()
        self.compiled: dict[StepShape, object] = {}
        self.failed: dict[StepShape, str] = {}
        self.records: list[CompileRecord] = []
        self.weights: dict[str, object] = {}
        self.quantized: dict[str, tuple[QuantizedWeight, list[nn.Module]]] = {}
        self.weights_version = 0
        self._parameter_arrays: dict[int, object] = {}
        """Each parameter's array, by the tensor's id (the tensors live as long as the model)."""
        self._read_weights()
        logger.info(
            "%s: %d weight arrays on %s; compilation cache %s", label, len(self.weights), self.device, self.cache_dir
        )

    def _read_weights(self) -> None:
        """The model's tensors as the step's JAX arguments, read again when its `weights_version`
        moved. Parameters are converted once (a later read reuses the array of the same tensor);
        buffers are copied on every read. A changed set of names (LoRA layers wrapped the
        projections) drops the compiled steps: they were traced over the old module tree."""
        self.weights_version = getattr(self.model, "weights_version", 0)
        quantized = _quantized_weights(self.step_module)
        # Tied weights appear once; functional_call ties them again.
        parameters = dict(self.step_module.named_parameters())
        buffers = dict(self.step_module.named_buffers())
        if self.weights and (set(self.weights), set(self.quantized)) != ({*parameters, *buffers}, set(quantized)):
            self.compiled.clear()
        self.quantized = quantized
        previous, self._parameter_arrays = self._parameter_arrays, {}

        def parameter(tensor: torch.Tensor):
            array = previous.get(id(tensor))
            self._parameter_arrays[id(tensor)] = array = self._to_jax(tensor) if array is None else array
            return array

        self.weights = {name: parameter(t) for name, t in parameters.items()}
        self.weights.update({name: self._to_jax(t.clone()) for name, t in buffers.items()})
        # A quantized weight is an object of tensors, which functional_call cannot substitute:
        # its tensors are step arguments too, put into a stand-in object while tracing.
        self.quantized_arrays = {
            key: {f: parameter(getattr(w, f)) for f in QUANTIZED_FIELDS if getattr(w, f) is not None}
            for key, (w, _) in quantized.items()
        }

    def _to_jax(self, tensor: torch.Tensor):
        import jax

        array = jax.dlpack.from_dlpack(tensor.detach().contiguous())  # zero-copy on XLA:CPU
        return array if xla_cpu_requested() else jax.device_put(array, self.device)

    def _wrap(self, array) -> torch.Tensor:
        return self.torchax.tensor.Tensor(array, self.torchax.default_env())

    def allocate_kv(self, shape: tuple[int, ...], dtype: torch.dtype, num_layers: int) -> list[torch.Tensor]:
        import jax.numpy as jnp

        jax_dtype = jnp.bfloat16 if dtype == torch.bfloat16 else jnp.dtype(str(dtype).removeprefix("torch."))
        return [self._wrap(jnp.zeros(shape, jax_dtype, device=self.device)) for _ in range(num_layers)]

    def shape_for(self, inputs: AttentionInputs, num_rows: int, lora: bool = False) -> StepShape:
        seqs = bucket(self.seq_buckets, len(inputs.seq_lens))
        pages = -(-max(max(inputs.seq_lens), MIN_KV_TOKENS) // self.page_size)
        pages = 1 << (pages - 1).bit_length()
        if inputs.is_decode:
            tokens, max_q = seqs, 1
        else:
            tokens = bucket(TOKEN_BUCKETS, sum(inputs.extend_lens))
            max_q = tokens
        rows = seqs if num_rows <= seqs else tokens
        return StepShape(tokens, RaggedShape(seqs, pages, max_q), rows, lora)

    def _function(self, max_q_len: int):
        import jax

        backend, module = self.backend, self.step_module

        quantized = self.quantized

        def step(weights, quantized_arrays, kv_buffers, ids, positions, contract, rows, lora_slots):
            with torch.inference_mode(False), torch.no_grad(), _substituted(quantized, quantized_arrays):
                ctx = ForwardContext(backend, backend.metadata(contract, max_q_len), list(kv_buffers), lora_slots)
                logits = torch.func.functional_call(module, weights, (ids, positions, ctx, rows))
            return logits, ctx.kv_buffers

        return jax.jit(self.torchax.interop.jax_view(step), donate_argnums=(2,))

    def _compile(self, shape: StepShape, args: tuple) -> object:
        started = time.perf_counter()
        lowered = self._function(shape.ragged.max_q_len).lower(*args)
        traced = time.perf_counter()
        compiled = lowered.compile()
        record = CompileRecord(shape, traced - started, time.perf_counter() - traced)
        self.records.append(record)
        logger.info(
            "%s: compiled step %s (trace %.2f s, compile %.2f s; %d shapes)",
            self.label,
            shape,
            record.trace_s,
            record.compile_s,
            len(self.records),
        )
        return compiled

    def run(self, step: StepInputs, kv_buffers: list[torch.Tensor]) -> StepOutput:
        import jax.numpy as jnp

        if getattr(self.model, "weights_version", 0) != self.weights_version:
            self._read_weights()
        inputs = step.attention
        num_rows = step.logit_rows.numel()
        adapter_slots = step.adapter_slots
        shape = self.shape_for(inputs, num_rows, adapter_slots is not None)
        if shape in self.failed:
            raise StepError(self.failed[shape])
        contract = pack_contract(inputs, self.page_size, shape.ragged)
        args = (
            self.weights,
            self.quantized_arrays,
            [b.jax() for b in kv_buffers],
            jnp.asarray(_padded(step.input_ids, shape.tokens)),
            jnp.asarray(_padded(step.positions, shape.tokens)),
            {k: jnp.asarray(v) for k, v in contract.items()},
            jnp.asarray(_padded(step.logit_rows, shape.rows)),
            None if adapter_slots is None else jnp.asarray(_padded(adapter_slots, shape.tokens)),
        )
        compiled = self.compiled.get(shape)
        if compiled is None:
            try:
                compiled = self._compile(shape, args)
            except Exception as exc:  # any failure of this one shape; the server keeps serving others
                message = f"{self.label}: the step of shape {shape} failed to compile: {type(exc).__name__}: {exc}"
                self.records.append(CompileRecord(shape, 0.0, 0.0, message))
                self.failed[shape] = message.splitlines()[0]
                logger.error("%s", message)
                raise StepError(self.failed[shape]) from exc
            self.compiled[shape] = compiled
        logits, new_kv = compiled(*args)
        self.stats.static_steps += 1
        return torch.from_numpy(np.array(logits[:num_rows])), [self._wrap(b) for b in new_kv]


QUANTIZED_FIELDS = ("qdata", "scales", "offsets")


def _quantized_weights(module: nn.Module) -> dict[str, tuple[QuantizedWeight, list[nn.Module]]]:
    """Each distinct quantized `weight` (keyed by its first module's name) and the modules that
    hold it (a tied lm_head shares the embedding's)."""
    found: dict[int, tuple[str, QuantizedWeight, list[nn.Module]]] = {}
    for name, m in module.named_modules():
        weight = getattr(m, "weight", None)
        if isinstance(weight, QuantizedWeight):
            found.setdefault(id(weight), (name, weight, []))[2].append(m)
    return {name: (weight, holders) for name, weight, holders in found.values()}


@contextlib.contextmanager
def _substituted(quantized: dict, arrays: dict) -> Iterator[None]:
    """While tracing, each quantized weight's tensors are the step's arguments `arrays`."""
    for key, (weight, holders) in quantized.items():
        stand_in = dataclasses.replace(weight, **arrays[key])
        for m in holders:
            m.weight = stand_in
    try:
        yield
    finally:
        for weight, holders in quantized.values():
            for m in holders:
                m.weight = weight


def _padded(values: torch.Tensor, size: int) -> np.ndarray:
    """`values` as int32, zero-padded to `size` entries."""
    out = np.zeros(size, np.int32)
    out[: values.numel()] = values.numpy()
    return out
