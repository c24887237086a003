"""KV entries of given pool slots, out of the device buffers and back, in the declared layout.

The attention backend declares one layer's KV buffer shape for a pool of `n` slots
(`kv_buffer_shape(n)`); the slot axis is the one axis whose length follows `n`, so this works
for K/V pairs and compressed latents alike without knowing which. The copies themselves are the
platform's device runtime's (`read_slots_async`, `write_slots`), so no code here names a device.

A block of KV read here is one host tensor `[num_layers, *kv_buffer_shape(len(slots))]`.
"""

from __future__ import annotations

import torch

from sglang.ops.attention import AttentionBackend
from sglang.platforms.device_runtime import DeviceRuntime, PendingRead


def slot_axis(backend: AttentionBackend) -> int:
    """The axis of one layer's KV buffer that indexes slots, found from the declared layout."""
    one, two = backend.kv_buffer_shape(1), backend.kv_buffer_shape(2)
    axes = [i for i, (a, b) in enumerate(zip(one, two)) if a != b]
    if len(one) != len(two) or len(axes) != 1:
        raise ValueError(f"cannot find the slot axis of the KV layout {one} / {two}")
    return axes[0]


class KVPageIO:
    """Copies the KV of pool slots between the runner's buffers and host tensors.

    `buffers` is the runner itself (anything with a mutable `kv_buffers` list): a functional
    device hands back new buffers from `write_slots`, and they replace the old ones there."""

    def __init__(self, runner: object, backend: AttentionBackend, runtime: DeviceRuntime) -> None:
        self.runner = runner
        self.axis = slot_axis(backend)
        self.runtime = runtime
        self.layout = tuple(backend.kv_buffer_shape(1))

    def block_shape(self, num_tokens: int) -> tuple[int, ...]:
        """Shape of the host tensor holding `num_tokens` tokens of every layer."""
        shape = list(self.layout)
        shape[self.axis] = num_tokens
        return (len(self.runner.kv_buffers), *shape)

    def read(self, slots: torch.Tensor) -> torch.Tensor:
        """Every layer's KV at `slots`, stacked on the host."""
        return self.read_async(slots).wait()

    def read_async(self, slots: torch.Tensor) -> PendingRead:
        """`read`, started: the copy runs after the steps queued so far (the one that wrote the
        slots may still be running) and the slots may be reused at once; `wait()` gives it."""
        return self.runtime.read_slots_async(self.runner.kv_buffers, self.axis, slots)

    def write(self, slots: torch.Tensor, values: torch.Tensor) -> None:
        """Stores `values` (from `read`, or a narrowed part of it) at `slots` in every layer."""
        if values.shape != self.block_shape(slots.numel()):
            raise ValueError(f"KV block of shape {tuple(values.shape)} for {slots.numel()} slots")
        buffers = self.runner.kv_buffers
        for layer, buffer in enumerate(buffers):
            buffers[layer] = self.runtime.write_slots(buffer, self.axis, slots, values[layer])
