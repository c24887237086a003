"""The base of every layer and model: an `nn.Module` whose call is its `forward`, nothing more.

torch's `Module.__call__` consults the global and the module's hook tables before and after
every `forward`. A batch-1 decode step of the embedded 30-layer model makes about 275 module
calls, and on a CPU that bookkeeping is a measurable share of the step (the figure is in
`benchmarks/README.md`, "Measured costs"). No layer here uses hooks, so they are refused rather
than silently skipped.
"""

from __future__ import annotations

from typing import Any, NoReturn

from torch import nn


class Module(nn.Module):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def _hooks_unsupported(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise NotImplementedError(f"{type(self).__name__} calls forward directly: module hooks never run")

    register_forward_hook = register_forward_pre_hook = _hooks_unsupported  # type: ignore[assignment]
    register_full_backward_hook = register_full_backward_pre_hook = _hooks_unsupported  # type: ignore[assignment]
