"""Runs one forward step of a model over a packed batch, on the selected platform.

The runner owns the KV buffers (one per layer, in the layout the attention backend declares)
and the attention backend; the scheduler owns which slots belong to whom. How a step runs
(eagerly, as a captured bucket, as a jitted function) is the platform's `StepRunner`, chosen
once here; `forward` is one call to it.
"""

from __future__ import annotations

import logging

import torch

from sglang import ops
from sglang.ops.attention import AttentionBackend, AttentionInputs, CaptureLimits
from sglang.ops.buckets import BucketPolicy
from sglang.ops.step import PADDING_SLOT, StepInputs, StepStats
from sglang.platforms.base import Platform, StepMode
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.execution.window_layers import WindowLayout
from sglang.runtime.layers.attention import SelfAttention
from sglang.runtime.loader.live_weights import reload_weights, write_weights
from sglang.runtime.memory.kv_dtype import kv_pool_dtype
from sglang.runtime.memory.window_pool import WindowPool
from sglang.runtime.models.decoder import DecoderForCausalLM
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)


def attention_backend_for(
    model: DecoderForCausalLM, platform: Platform, page_size: int = 1, kv_cache_dtype: str = "auto"
) -> AttentionBackend:
    """The bound attention backend, built for `model` (its rank's heads) on `platform`'s device,
    for a KV pool of `page_size`-token pages in `--kv-cache-dtype` (ValueError where the backend
    does not read it)."""
    backend = model.build_attention_backend(platform.device())
    backend.page_size = page_size
    backend.kv_dtype = kv_pool_dtype(kv_cache_dtype, backend)
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
        window_pool: WindowPool | None = None,
        window_refusal: str | None = None,
    ) -> None:
        """`graph_buckets`: decode batches up to its largest bucket run as static (captured or
        jitted) steps where the platform declares a way; None runs them eagerly. `window_pool`:
        windowed layers' buffers hold its slots (steps then carry window slots); without it,
        `window_refusal` says why in the log."""
        config = model.config
        self.model = model
        self.platform = platform
        self.device = platform.device()
        self.num_slots = num_slots
        self.window_pool = window_pool
        self.attn_backend = backend or attention_backend_for(model, platform)
        limits = None
        if graph_buckets is not None:
            layers = tuple(m.layer for m in model.modules() if isinstance(m, SelfAttention))
            limits = CaptureLimits.for_pool(graph_buckets.largest, num_slots, config.max_position, layers)
        self.graph_buckets = graph_buckets
        self.step_runner = platform.step_runner(
            model, self.attn_backend, graph_buckets, limits, tensor_parallel=tp_group().size > 1
        )
        self.kv_buffers = self._allocate_kv()
        layout = WindowLayout.of(config, self.attn_backend)
        if layout is None:
            logger.info(
                "KV cache: %d slots x %d layers x %d KV heads%s, %s, %.1f MiB",
                num_slots,
                config.num_layers,
                model.attention_heads[1],
                _rank_share(),
                str(self.attn_backend.kv_dtype).removeprefix("torch."),
                num_slots * kv_bytes_per_token(model, self.attn_backend) / 2**20,
            )
        else:
            window_slots = window_pool.num_slots if window_pool is not None else None
            reason = window_refusal or "the model runner was given no window pool"
            logger.info(layout.note(num_slots, window_slots, reason))

    def _allocate_kv(self) -> list[torch.Tensor]:
        """One buffer per layer: the full pool's, or the window pool's for windowed layers (its
        padding slot zeroed: out-of-window entries of window slot lists read it, masked out)."""
        backend, config = self.attn_backend, self.model.config
        dtype = backend.kv_dtype
        full_shape = backend.kv_buffer_shape(self.num_slots)
        if self.window_pool is None:
            return self.step_runner.allocate_kv(full_shape, dtype, config.num_layers)
        windowed = [config.sliding_window_for(i) is not None for i in range(config.num_layers)]
        window_shape = backend.kv_buffer_shape(self.window_pool.num_slots)
        window = self.step_runner.allocate_kv(window_shape, dtype, sum(windowed))
        slot_axis = next(a for a, (x, y) in enumerate(zip(window_shape, backend.kv_buffer_shape(1))) if x != y)
        for buffer in window:
            buffer.select(slot_axis, PADDING_SLOT).zero_()
        full = iter(self.step_runner.allocate_kv(full_shape, dtype, len(windowed) - sum(windowed)))
        window_iter = iter(window)
        return [next(window_iter) if w else next(full) for w in windowed]

    @property
    def step_stats(self) -> StepStats:
        return self.step_runner.stats

    @torch.inference_mode()
    def forward(self, step: StepInputs) -> torch.Tensor:
        """Float32 logits `[len(step.logit_rows), vocab]`; the step's K/V are written to the cache."""
        logits, self.kv_buffers = self.step_runner.run(step, self.kv_buffers)
        if step.draft_tokens:
            self.step_runner.stats.verify_steps += 1
        return logits

    @torch.inference_mode()
    def prepare_decode_buckets(self, largest: int) -> list[int]:
        """Captures the decode buckets of 1 to `largest` rows now rather than at their first step.
        For speculative decoding: a verify step of one request with `d` drafts runs as a bucket
        of `d + 1` rows and `d` varies from step to step, so without this a fresh server's first
        requests pay a capture for each new length. Every step here reads and writes only the
        padding slot. One eager step of two tokens goes first: kernels build what they keep per
        weight (the int16 kernel's tile records) on first use, and built inside a capture that
        work would be recorded into the captured step and redone at every replay.

        Returns the sizes captured: none where steps are not captured (eager or jitted runners),
        under tensor parallelism (every rank would have to run these steps in step) or with a
        window pool (its steps carry window slots, which these would lack)."""
        capturing = self.platform.capabilities.steps.mode is StepMode.CAPTURED
        if self.graph_buckets is None or not capturing or tp_group().size > 1 or self.window_pool is not None:
            return []
        sizes = sorted({b for n in range(1, largest + 1) if (b := self.graph_buckets.bucket_for(n)) is not None})
        self.step_runner.run(self._padding_step((2,)), self.kv_buffers)
        for rows in sizes:
            _, self.kv_buffers = self.step_runner.run(self._padding_step((1,) * rows), self.kv_buffers)
        return sizes

    def _padding_step(self, lengths: tuple[int, ...]) -> StepInputs:
        """A step of token 0 at positions from 0, one sequence per entry of `lengths`, every
        token in the padding slot: an extend where a length is above 1, else decode rows."""
        tokens = sum(lengths)
        slots = torch.full((tokens,), PADDING_SLOT, dtype=torch.int64, device=self.device)
        positions = torch.cat([torch.arange(n) for n in lengths]).to(self.device)
        attention = AttentionInputs(lengths, lengths, slots)
        ids = torch.zeros(tokens, dtype=torch.long, device=self.device)
        return StepInputs(ids, positions, attention, torch.arange(len(lengths), device=self.device))

    def reload_weights(self, args: ServerArgs, model_path: str) -> None:
        """The model's weights replaced in place by `model_path`'s (`live_weights.reload_weights`):
        captured steps keep running on the same storage. The second copy's memory goes back to the
        system (a host's C allocator would keep it, a device's caching allocator hold it)."""
        reload_weights(self.model, self.platform, args, model_path)
        self.platform.runtime.empty_cache()

    def write_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        """Checkpoint tensors copied into the model's dense parameters in place (`live_weights.write_weights`)."""
        write_weights(self.model, named_tensors)

    def kv_copy_unsupported(self) -> str | None:
        """Why `copy_kv` cannot run here (a KV layout other than the default, no rotary table), or None."""
        if self.window_pool is not None:
            return "windowed layers keep their K/V in a window pool of their own"
        config = self.model.config
        default = (2, self.num_slots, self.model.attention_heads[1], config.head_dim)
        shape = tuple(self.attn_backend.kv_buffer_shape(self.num_slots))
        if shape != default:
            return f"the attention backend's KV layout {shape} is not the default {default}"
        if not isinstance(getattr(self.model, "cos_sin", None), torch.Tensor):
            return "the model has no rotary table (cos_sin)"
        if getattr(self.model, "local_cos_sin", None) is not None:
            return "the model's sliding-window layers use a rotary table of their own"
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


def _rank_share() -> str:
    """Under tensor parallelism, which rank the KV figures are of: heads are dealt out by whole
    GQA groups, so ranks may hold different numbers of KV heads (3 over 2 ranks: 2 and 1) and
    log different sizes for the same slot count."""
    group = tp_group()
    return f" (tp rank {group.rank} of {group.size})" if group.size > 1 else ""


def _shift_table(cos_sin: torch.Tensor, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Row `i` is `[cos(a_t - a_s) | sin(a_t - a_s)]` for `a_s`, `a_t` the rotary angles of
    `source[i]` and `target[i]`: rotating by it turns a rotation by `a_s` into one by `a_t`."""
    cos_s, sin_s = cos_sin.index_select(0, source).chunk(2, dim=-1)
    cos_t, sin_t = cos_sin.index_select(0, target).chunk(2, dim=-1)
    return torch.cat([cos_t * cos_s + sin_t * sin_s, sin_t * cos_s - cos_t * sin_s], dim=-1)
