"""The `Platform` contract: what a device declares before anything is built.

A platform is a class with class-level declarations (identity, capabilities, native op table)
and a classmethod `availability()` that says whether this machine can run it and, if not, why.
Core code reads these declarations and never branches on a platform's name.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import torch

from sglang import ops
from sglang.ops.binding import OpBinding
from sglang.ops.collectives import Communicator, SingleProcessCommunicator

logger = logging.getLogger(__name__)


class PlatformError(RuntimeError):
    """A platform cannot serve what was asked; the message says which platform and why."""


@dataclass(frozen=True)
class Availability:
    available: bool
    reason: str = ""

    @classmethod
    def yes(cls) -> Availability:
        return cls(True)

    @classmethod
    def no(cls, reason: str) -> Availability:
        return cls(False, reason)


@dataclass(frozen=True)
class Capabilities:
    """Facts core code chooses paths by. Frozen: declared once, never changed at run time."""

    dtypes: frozenset[torch.dtype]
    page_sizes: frozenset[int] | None = None
    """Page sizes the attention backend accepts; None means any."""
    graph_capture: bool = False
    torch_compile: bool = False
    triton: bool = False
    custom_all_reduce: bool = False
    overlap_scheduling: bool = False
    mixed_prefill_decode: bool = True
    functional_kv: bool = False
    """KV buffers are replaced, not mutated (JAX): callers must keep the buffer ops hand back."""
    distributed_backend: str = "gloo"
    default_dtype: torch.dtype = torch.float32
    extra: Mapping[str, object] = field(default_factory=dict)


class Platform(ABC):
    name: ClassVar[str]
    device_type: ClassVar[str]
    """The torch device type tensors live on (`cpu`, `cuda`, `xpu`, `npu`, `jax`)."""
    dispatch_key: ClassVar[str]
    """The `torch.library` dispatch key opaque custom ops register under."""
    capabilities: ClassVar[Capabilities]
    native_ops: ClassVar[Mapping[str, str]] = {}
    """Op name -> qualified name of this platform's implementation; unnamed ops use the reference."""

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Whether this machine can run the platform; must not raise when vendor packages are absent."""

    @classmethod
    def is_available(cls) -> bool:
        return cls.availability().available

    def device(self, index: int = 0) -> torch.device:
        return torch.device(self.device_type, index)

    def configure_host_threads(self, threads: int | None) -> int:
        """Sets torch's intra-op host threads (given, else torch's default); returns the count."""
        if threads:
            torch.set_num_threads(threads)
        return torch.get_num_threads()

    def bind_ops(self, force_reference: bool | None = None) -> list[OpBinding]:
        return ops.bind(self.native_ops, owner=self.name, force_reference=force_reference)

    def communicator(self) -> Communicator:
        """The communicator for the current process group (single-process when none is set up)."""
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_world_size() > 1:
            return ops.TorchDistributedCommunicator()
        return SingleProcessCommunicator()

    def check_dtype(self, dtype: torch.dtype) -> None:
        if dtype not in self.capabilities.dtypes:
            supported = ", ".join(sorted(str(d).removeprefix("torch.") for d in self.capabilities.dtypes))
            raise PlatformError(f"{self.name}: dtype {dtype} is not supported (supported: {supported})")

    def check_page_size(self, page_size: int) -> None:
        allowed = self.capabilities.page_sizes
        if page_size < 1 or (allowed is not None and page_size not in allowed):
            raise PlatformError(f"{self.name}: page size {page_size} is not supported ({sorted(allowed or [])})")

    def describe(self) -> str:
        return f"{self.name} ({self.device_type})"
