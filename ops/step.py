"""The step contract: what the model runner hands a platform's step runner, and gets back.

A step is one forward pass over a packed batch (prefill, decode, or a mix). The runtime builds
`StepInputs`; the platform runs them with the `StepRunner` it chose from its declared
capabilities (eager steps, bucketed capture, or jitted functional steps; `platforms.execution`
and the tpu platform hold the three); the model reads a `ForwardContext`. These types sit below
both `runtime/` and `platforms/`, so neither imports the other to run a step.

Invariants every runner keeps:
- `run` returns float32 logits of exactly `step.logit_rows`, and the KV buffers to use next (the
  same tensors on in-place devices, new ones on functional devices: the given ones may then
  have been donated); the logits are the caller's until the runner's next `run`, which may
  overwrite them (a captured step's static output, as upstream's CUDA graph runner returns);
- a step that cannot run raises; `StepError` means the buffers given are still valid, any other
  exception means the step's own new slots may hold garbage (the caller frees them);
- which runner serves a step never changes its results beyond kernel rounding.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from sglang.ops.attention import AttentionBackend, AttentionInputs, AttentionMetadata

PADDING_SLOT = 0
"""The KV slot that padded rows of a static-shape step write to; the allocator never hands it out."""

StepOutput = tuple[torch.Tensor, list[torch.Tensor]]
"""Float32 logits and the KV buffers to use next."""


@dataclass(frozen=True)
class StepInputs:
    """One step's packed batch. `logit_rows` selects the token rows whose logits are needed
    (each sequence's last token, plus prompt tokens whose logprobs were asked for, plus every
    drafted token of a speculative verify step)."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    attention: AttentionInputs
    logit_rows: torch.Tensor
    lora_slots: torch.Tensor | None = None
    """Per token row, the LoRA slot its adapter occupies (0: none); None when LoRA is off."""
    draft_tokens: int = 0
    """Drafted tokens under verification in this step (speculative decoding). A verify step is
    an extend over each request's cache like any other: runners serve it through their extend
    path, and count it in `StepStats.verify_steps`."""

    @property
    def adapter_slots(self) -> torch.Tensor | None:
        """`lora_slots` when a row uses an adapter, else None (LoRA off, or every row the base
        model's: slot 0 adds exactly nothing, so runners run such a step as one without LoRA)."""
        if self.lora_slots is None or not bool(self.lora_slots.any()):
            return None
        return self.lora_slots


@dataclass
class ForwardContext:
    """Attention state (and LoRA rows) for one step.

    `kv_buffers[i]` is layer `i`'s KV buffer. Each attention layer replaces its entry with the
    buffer the attention op hands back, so after the forward the list holds the buffers to use
    next step (the same tensors on in-place platforms, new ones on functional platforms).
    """

    attn_backend: AttentionBackend
    attn_metadata: AttentionMetadata
    kv_buffers: list[torch.Tensor]
    lora_slots: torch.Tensor | None = None
    """`StepInputs.lora_slots` on the device (a static buffer in a captured step)."""
    window_metadata: AttentionMetadata | None = None
    """Metadata planned from the step's window slots (`AttentionInputs.for_window`), which
    windowed layers read instead of `attn_metadata`; None without a window pool."""

    def metadata_for(self, windowed: bool) -> AttentionMetadata:
        """The metadata a layer reads: the window pool's for a windowed layer where there is one."""
        return self.window_metadata if windowed and self.window_metadata is not None else self.attn_metadata


class StepError(RuntimeError):
    """A step could not run (its batch shape failed to compile, say): the requests in it fail
    with this message, the KV buffers given to the step are still valid, and the server goes on
    with the next step."""


class StepModel(Protocol):
    """What a step runner calls: the decoder's forward over packed tokens, then its logits.

    A model whose tensors change between steps (LoRA layers attached, adapter slots written in
    place) counts each change in an int attribute `weights_version`; a runner that holds copies
    of the weights (the tpu platform's jitted steps) reads the model's tensors again when it
    differs from the version it read. A model without the attribute never changes them."""

    def __call__(self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: ForwardContext) -> torch.Tensor: ...

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor: ...


@dataclass
class StepStats:
    """How a runner's steps ran, for `/metrics` and tests. Counts only grow."""

    eager_steps: int = 0
    """Steps run eagerly (every step of an eager runner; the rest of a capturing one's)."""
    static_steps: int = 0
    """Steps replayed from a captured bucket or run as a compiled (jitted) function."""
    static_fallbacks: int = 0
    """Decode steps a bucket would have served but whose metadata did not fit its static buffers
    (shared prefixes past the declared limits, say): they ran eagerly instead."""
    verify_steps: int = 0
    """Steps that verified drafted tokens (speculative decoding), whichever way they ran."""
    captured_buckets: list[int] = field(default_factory=list)
    """Buckets made static so far, in capture order."""


class StepRunner(Protocol):
    """Runs steps on one platform. Exactly one per model runner, chosen by `Platform.step_runner`."""

    stats: StepStats

    def allocate_kv(self, shape: tuple[int, ...], dtype: torch.dtype, num_layers: int) -> list[torch.Tensor]:
        """One KV buffer per layer, of the attention backend's layout."""

    def run(self, step: StepInputs, kv_buffers: list[torch.Tensor]) -> StepOutput:
        """Logits `[len(step.logit_rows), vocab]` (float32, host or device) and the KV buffers to
        use next; see the module's invariants."""
