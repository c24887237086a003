"""Runs one forward step of a model over a packed batch, on the selected platform.

The runner owns the KV buffers (one per layer, in the layout the attention backend declares)
and the attention backend; the scheduler owns which slots belong to whom.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from sglang import ops
from sglang.ops.attention import AttentionBackend, AttentionInputs, CaptureLimits
from sglang.platforms.base import Platform
from sglang.runtime.batch_buckets import BucketPolicy
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.forward_context import ForwardContext
from sglang.runtime.graph_runner import GraphRunner, step_capturer
from sglang.runtime.layers.attention import SelfAttention
from sglang.runtime.models.decoder import DecoderForCausalLM

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StepInputs:
    """One step's packed batch. `logit_rows` selects the token rows whose logits are needed
    (each sequence's last token, plus prompt tokens whose logprobs were asked for)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attention: AttentionInputs
    logit_rows: torch.Tensor


def attention_backend_for(model: DecoderForCausalLM, platform: Platform, page_size: int = 1) -> AttentionBackend:
    """The bound attention backend, built for `model` (its rank's heads) on `platform`'s device,
    for a KV pool of `page_size`-token pages."""
    heads, kv_heads = model.attention_heads
    backend = ops.attention_backend(heads, kv_heads, model.config.head_dim, model.dtype, platform.device())
    backend.page_size = page_size
    return backend


def kv_bytes_per_token(model: DecoderForCausalLM, backend: AttentionBackend) -> int:
    """Bytes one token's K/V take across every layer, in the backend's layout."""
    return model.config.num_layers * backend.kv_bytes_per_token()


class ModelRunner:
    def __init__(
        self,
        model: DecoderForCausalLM,
        platform: Platform,
        num_slots: int,
        backend: AttentionBackend | None = None,
        graph_buckets: BucketPolicy | None = None,
    ) -> None:
        """`graph_buckets`: decode batches up to its largest bucket run as static (captured,
        compiled or jitted) steps where the platform's runtime offers a way; None runs eagerly."""
        config = model.config
        self.model = model
        self.platform = platform
        self.device = platform.device()
        self.num_slots = num_slots
        self.attn_backend = backend or attention_backend_for(model, platform)
        shape = self.attn_backend.kv_buffer_shape(num_slots)
        # A platform that runs steps its own way (jitted functional steps) owns their buffers too.
        self.executor = platform.step_executor(model, self.attn_backend, graph_buckets)
        if self.executor is not None:
            self.kv_buffers = self.executor.allocate_kv(shape, model.dtype, config.num_layers)
        else:
            # Uninitialized: no kernel reads a slot before writing it (op parity fills free slots
            # with NaN to hold them to that), and on the host an allocation this large is mapped
            # lazily, so resident memory follows the tokens the pool has held, not its capacity.
            layers = range(config.num_layers)
            self.kv_buffers = [torch.empty(shape, dtype=model.dtype, device=self.device) for _ in layers]
        logger.info(
            "KV cache: %d slots x %d layers, %.1f MiB",
            num_slots,
            config.num_layers,
            num_slots * kv_bytes_per_token(model, self.attn_backend) / 2**20,
        )
        self.graph_runner = self._graph_runner(graph_buckets) if self.executor is None else None

    def _graph_runner(self, policy: BucketPolicy | None) -> GraphRunner | None:
        if policy is None:
            return None
        capturer = step_capturer(self.platform.runtime)
        if capturer is None:
            logger.info("decode graphs off: the %s runtime cannot make a step static", self.platform.name)
            return None
        layers = tuple(m.layer for m in self.model.modules() if isinstance(m, SelfAttention))
        if tp_group().size > 1 and not self.platform.runtime.captures_collectives:
            logger.info("decode graphs off: the %s runtime's static steps cannot hold collectives", self.platform.name)
            return None
        limits = CaptureLimits.for_pool(policy.largest, self.num_slots, self.model.config.max_position, layers)
        runner = GraphRunner(self.model, self.attn_backend, capturer, policy, limits, self.device)
        if runner.disabled_reason is not None:
            logger.info("decode graphs off: %s", runner.disabled_reason)
            return None
        logger.info("decode graphs on, buckets %s", policy.sizes)
        return runner

    @torch.inference_mode()
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Float32 logits `[len(step.logit_rows), vocab]`; the step's K/V are written to the cache."""
        if self.executor is not None:
            logits, self.kv_buffers = self.executor.run(step, self.kv_buffers)
            return logits
        bucket = self.graph_runner.bucket_for(step.attention) if self.graph_runner is not None else None
        if bucket is not None:
            logits, self.kv_buffers = self.graph_runner.run(
                step.input_ids.to(self.device), step.positions.to(self.device), step.attention,
                step.logit_rows, self.kv_buffers, bucket,
            )  # fmt: skip
            return logits
        ctx = ForwardContext(self.attn_backend, self.attn_backend.plan(step.attention), self.kv_buffers)
        hidden = self.model(step.input_ids.to(self.device), step.positions.to(self.device), ctx)
        self.kv_buffers = ctx.kv_buffers
        return self.model.compute_logits(hidden[step.logit_rows.to(self.device)])

    def kv_copy_unsupported(self) -> str | None:
        """Why `copy_kv` cannot run here (a KV layout other than the default, no rotary table), or None."""
        config = self.model.config
        default = (2, self.num_slots, self.model.attention_heads[1], config.head_dim)
        shape = tuple(self.attn_backend.kv_buffer_shape(self.num_slots))
        if shape != default:
            return f"the attention backend's KV layout {shape} is not the default {default}"
        if not isinstance(getattr(self.model, "cos_sin", None), torch.Tensor):
            return "the model has no rotary table (cos_sin)"
        return None

    @torch.inference_mode()
    def copy_kv(
        self, src_slots: torch.Tensor, dst_slots: torch.Tensor, src_positions: torch.Tensor, position_delta: int
    ) -> None:
        """In every layer, writes at `dst_slots` the values at `src_slots` and their keys moved by
        RoPE from `src_positions` to `src_positions + position_delta`.

        Keys are stored rotated by their position; projection happens before rotation, so moving a
        key is one more rotation, by the angle of the target position minus that of the source
        (`_shift_table`). This is exact for every rotary table, dynamic NTK included (whose angle
        is not linear in the position). Only the position changes: what the token attended to
        when its key was computed (in layers past the first) stays as it was.
        Invariants: `src_slots` are not overwritten (the slot sets must be disjoint); delta 0
        copies bit for bit. Requires `kv_copy_unsupported() is None`.
        """
        if (reason := self.kv_copy_unsupported()) is not None:
            raise NotImplementedError(f"copy_kv: {reason}")
        if src_slots.numel() != dst_slots.numel() or src_slots.numel() != src_positions.numel():
            raise ValueError("src_slots, dst_slots and src_positions differ in length")
        if not src_slots.numel():
            return
        src, dst = src_slots.to(self.device), dst_slots.to(self.device)
        rows = table = None
        if position_delta:
            source = src_positions.to(self.device)
            table = _shift_table(self.model.cos_sin, source, source + position_delta)
            rows = torch.arange(src.numel(), device=self.device)
        for layer, buffer in enumerate(self.kv_buffers):
            keys, values = buffer[0].index_select(0, src), buffer[1].index_select(0, src)
            if table is not None:
                # apply_rotary rotates queries too; a one-head dummy keeps that cheap and never
                # aliases the keys (an in-place kernel must not rotate them twice).
                _, keys = ops.apply_rotary(rows, torch.zeros_like(keys[:, :1]), keys, table)
            self.kv_buffers[layer] = ops.store_kv(buffer, dst, keys, values)


def _shift_table(cos_sin: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Row `i` is `[cos(a_t - a_s) | sin(a_t - a_s)]` for `a_s`, `a_t` the rotary angles of
    `source[i]` and `target[i]`: rotating by it turns a rotation by `a_s` into one by `a_t`."""
    cos_s, sin_s = cos_sin.index_select(0, source).chunk(2, dim=-1)
    cos_t, sin_t = cos_sin.index_select(0, target).chunk(2, dim=-1)
    return torch.cat([cos_t * cos_s + sin_t * sin_s, sin_t * cos_s - cos_t * sin_s], dim=-1)
