"""How a platform runs the model runner's steps, when it does not run them eagerly.

`Platform.step_executor(model, backend)` returns a `StepExecutor` or None. None (cpu, cuda by
default) means the runner's own path: eager steps, with the graph runner for decode buckets where
the device runtime can make a step static. A platform whose steps are compiled functions of
their inputs returns an executor instead (tpu: jitted JAX steps over donated KV buffers). The
executor then allocates the KV buffers and runs every step; the runner stays the owner of the
buffers between steps, keeping whichever ones the executor hands back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import torch

if TYPE_CHECKING:
    from sglang.runtime.model_runner import StepInputs


class StepError(RuntimeError):
    """A step could not run (its batch shape failed to compile, say): the requests in it fail
    with this message, and the server goes on with the next step."""


class StepExecutor(Protocol):
    def allocate_kv(self, shape: tuple[int, ...], dtype: torch.dtype, num_layers: int) -> list[torch.Tensor]:
        """One zeroed KV buffer per layer, of the attention backend's layout."""

    def run(self, step: StepInputs, kv_buffers: list[torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Host float32 logits `[len(step.logit_rows), vocab]` and the KV buffers to use next
        (the given ones are invalid afterwards: they may have been donated). Raises `StepError`
        when this step cannot run; the buffers given are then still valid."""
