"""The `Platform` contract: what a device declares before anything is built.

A platform is a class with class-level declarations (identity, capabilities, the kernel families
it uses in preference order, its device services) and a classmethod `availability()` that says
whether this machine can run it and, if not, why. Core code reads these declarations and never
branches on a platform's name.
"""

from __future__ import annotations

import enum
import importlib.util
import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, ClassVar

import torch

from sglang import ops
from sglang.ops.binding import force_reference_requested, resolve
from sglang.ops.collectives import Communicator, SingleProcessCommunicator, TorchDistributedCommunicator
from sglang.ops.selection import Candidate, OpTable, Requirements, SelectionContext, select
from sglang.platforms.device_runtime import DeviceRuntime, visible_devices_hint
from sglang.platforms.kernels.registry import family, probe_failure

if TYPE_CHECKING:
    from sglang.ops.attention import AttentionBackend, CaptureLimits
    from sglang.ops.buckets import BucketPolicy
    from sglang.ops.step import StepModel, StepRunner

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


class StepMode(enum.Enum):
    """How a platform runs steps; each mode is one `StepRunner` implementation."""

    EAGER = "eager"
    """Every step planned and run op by op (`platforms.execution.eager`)."""
    CAPTURED = "captured"
    """Decode buckets made static by the device runtime's `capture_step`, replayed; other steps
    eager (`platforms.execution.captured`)."""
    JITTED = "jitted"
    """Every step a compiled function over donated buffers (`Platform.jitted_step_runner`)."""


@dataclass(frozen=True)
class StepExecution:
    """The platform's declared way of running steps, and the facts its bucket policy needs."""

    mode: StepMode = StepMode.EAGER
    exact_buckets: bool = False
    """Every decode batch size up to the largest static one is its own bucket, so no row is
    padded: for a device where a padded row costs what a real one does and a capture is cheap."""
    default_max_batch: int | None = None
    """The largest decode batch made static when `--cuda-graph-max-bs` is not given; None means
    `--max-running-requests`."""
    static_collectives: bool = True
    """Whether a static step may call the communicator's collectives (a CUDA graph records
    NCCL's kernels; a TorchScript trace cannot record `torch.distributed` calls). When not, a
    tensor-parallel server runs its steps eagerly."""


@dataclass(frozen=True)
class Capabilities:
    """Facts core code chooses paths by. Frozen: declared once, never changed at run time."""

    dtypes: frozenset[torch.dtype]
    """Model dtypes the platform computes in (the loader refuses others)."""
    default_dtype: torch.dtype = torch.float32
    """What `--dtype auto` resolves to when the checkpoint does not say."""
    page_sizes: frozenset[int] | None = None
    """KV page sizes the platform's attention accepts; None means any."""
    mixed_prefill_decode: bool = True
    """Prefill and decode rows may share one step (the scheduler batches them together)."""
    steps: StepExecution = StepExecution()
    """How steps run (eager, captured buckets, jitted): `Platform.step_runner` reads it."""


@dataclass(frozen=True)
class ModelFacts:
    """What op selection needs to know of the model; None when no model is given."""

    dtype: torch.dtype
    head_dim: int | None = None
    num_heads: int | None = None
    num_kv_heads: int | None = None
    page_size: int | None = None
    weight_format: str = "dense"
    features: frozenset[str] = frozenset()
    """Features only some kernels serve (`ops.selection.FEATURE_OPS`: attention sinks, biased experts)."""

    @property
    def gqa_ratio(self) -> int | None:
        if self.num_heads is None or not self.num_kv_heads:
            return None
        return self.num_heads // self.num_kv_heads


def package_importable(name: str) -> bool:
    """Whether `name` (dotted names allowed) can be imported, without importing it where possible."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a dotted name whose parent is missing or broken
        return False


class Platform(ABC):
    name: ClassVar[str]
    device_type: ClassVar[str]
    """The torch device type tensors live on (`cpu`, `cuda`, `xpu`, `npu`, `jax`)."""
    dispatch_key: ClassVar[str]
    """The `torch.library` dispatch key opaque custom ops register under."""
    capabilities: ClassVar[Capabilities]
    kernel_families: ClassVar[tuple[str, ...]] = ()
    """Kernel families this platform uses, most preferred first; the reference is always last."""
    family_requirements: ClassVar[Mapping[str, Requirements]] = {}
    """What a family needs on this platform beyond its own declarations (xpu: Intel's Triton)."""
    kernel_tuning: ClassVar[Mapping[str, object]] = {}
    """Per family, the settings its tunable kernels take (block sizes, warps, HIP waves per EU)."""
    runtime_class: ClassVar[str] = "sglang.platforms.device_runtime:DeviceRuntime"
    """Qualified name of the device runtime (synchronize, memory, caches, graph capture)."""
    distributed_backend: ClassVar[str] = "gloo"
    """The torch.distributed backend this platform's collectives run on."""
    visible_devices_env: ClassVar[str | None] = None
    """The variable that hides this platform's devices from a process (`CUDA_VISIBLE_DEVICES`);
    set on platforms whose tensor-parallel ranks each take a device of their own."""
    profiler_activity: ClassVar[str | None] = None
    """The `torch.profiler.ProfilerActivity` that records this platform's device timeline
    (`CUDA`, `XPU`); None where torch's profiler sees only the host."""

    def __init__(self, kernel_families: Sequence[str] | None = None) -> None:
        """`kernel_families` replaces the declared list, for conformance runs of one family
        on another platform's tensors (the Triton interpreter on cpu)."""
        if kernel_families is not None:
            self.kernel_families = tuple(kernel_families)
        self.device_index = 0
        """This process's device (`bind_local_rank`); 0 outside tensor parallelism."""

    @classmethod
    @abstractmethod
    def availability(cls) -> Availability:
        """Whether this machine can run the platform; must not raise when vendor packages are absent."""

    @classmethod
    def is_available(cls) -> bool:
        return cls.availability().available

    def device(self, index: int | None = None) -> torch.device:
        """Device `index`, by default this process's own (`bind_local_rank`)."""
        return torch.device(self.device_type, self.device_index if index is None else index)

    def bind_local_rank(self, local_rank: int) -> None:
        """Tensor parallelism: the rank `local_rank` of this node takes the device of that index
        among those visible to it, made current (so memory is counted, and collectives run, on
        its own device); before the process group is joined. A platform without
        `visible_devices_env` (cpu, tpu) keeps one device for every rank."""
        if self.visible_devices_env is None:
            return
        count = self.runtime.device_count()
        if local_rank >= count:
            raise PlatformError(
                f"{self.name}: local rank {local_rank} needs device {local_rank}, but {count} "
                f"visible{visible_devices_hint(self.visible_devices_env)}: one device per rank on a node"
            )
        self.device_index = local_rank
        self.runtime.set_device(local_rank)

    def device_capability(self) -> tuple[int, int] | None:
        """The device's compute capability where kernels depend on it (CUDA's sm version)."""
        return None

    def device_arch(self) -> str | None:
        """The device's architecture name where kernels are built per architecture (AMD's gfx)."""
        return None

    @cached_property
    def runtime(self) -> DeviceRuntime:
        return resolve(self.runtime_class)()

    def configure_host_threads(self, threads: int | None) -> int:
        """Sets torch's intra-op host threads (given, else torch's default); returns the count."""
        if threads:
            torch.set_num_threads(threads)
        return torch.get_num_threads()

    # Op selection -------------------------------------------------------------------------

    def select_ops(
        self,
        facts: ModelFacts,
        overrides: Mapping[str, str] | None = None,
        force_reference: bool | None = None,
        assume_missing: Sequence[str] = (),
    ) -> OpTable:
        """The op table for a model with `facts` on this platform, without binding anything.

        On a machine without this device, packages are assumed importable unless named in
        `assume_missing`, and the table is headed by the reason the device is unavailable.
        """
        availability = self.availability()
        missing = set(assume_missing)

        def present(package: str) -> bool:
            if package in missing or package.split(".")[0] in missing:
                return False
            return package_importable(package) if availability.available else True

        ctx = SelectionContext(
            dtype=facts.dtype,
            head_dim=facts.head_dim,
            gqa_ratio=facts.gqa_ratio,
            page_size=facts.page_size,
            weight_format=facts.weight_format,
            features=facts.features,
            device_capability=self.device_capability() if availability.available else None,
            device_arch=self.device_arch() if availability.available else None,
            package_present=present,
        )
        candidates = [c for name in self.kernel_families for c in self.family_candidates(name)]
        forced = force_reference_requested() if force_reference is None else force_reference
        header = "" if availability.available else f"not available here ({availability.reason}); as declared"
        return select(self.name, candidates, self.kernel_families, ctx, overrides, forced, header)

    def family_candidates(self, name: str) -> list[Candidate]:
        """A family's candidates with this platform's extra requirements for that family. On a
        machine that has this device, a family whose kernels cannot run here (its probe: a C++
        build that failed, say) keeps its candidates, each ineligible with the probe's reason, so
        `sglang ops` and the startup log say why and the next family serves; a device this
        machine lacks is never probed (the table is then its declaration)."""
        extra = self.family_requirements.get(name)
        declared = family(name).candidates
        declared = [c if extra is None else replace(c, requires=c.requires.merged(extra)) for c in declared]
        reason = probe_failure(name) if self.is_available() else None
        if reason is None:
            return declared
        return [replace(c, requires=replace(c.requires, unavailable=reason)) for c in declared]

    def bind_ops(
        self,
        facts: ModelFacts,
        overrides: Mapping[str, str] | None = None,
        force_reference: bool | None = None,
    ) -> OpTable:
        """Selects and installs one implementation per op on `sglang.ops`; logs the table."""
        table = self.select_ops(facts, overrides, force_reference)
        ops.install(table, self.kernel_tuning)
        note = " (every op forced to its reference)" if table.forced_reference else ""
        logger.info("%s ops%s: %s", self.name, note, table.summary())
        return table

    # Device services ------------------------------------------------------------------------

    def init_distributed(self, rank: int, world_size: int, init_method: str, timeout_s: float = 60.0) -> Communicator:
        """Joins the process group on this platform's backend and returns its communicator."""
        import torch.distributed as dist

        dist.init_process_group(
            self.distributed_backend,
            init_method=init_method,
            rank=rank,
            world_size=world_size,
            timeout=timedelta(seconds=timeout_s),
        )
        return self.communicator()

    def communicator(self) -> Communicator:
        """The communicator for the current process group (single-process when none is set up)."""
        import torch.distributed as dist

        if dist.is_initialized() and dist.get_world_size() > 1:
            return TorchDistributedCommunicator()
        return SingleProcessCommunicator()

    def step_runner(
        self,
        model: StepModel,
        backend: AttentionBackend,
        buckets: BucketPolicy | None,
        limits: CaptureLimits | None,
        tensor_parallel: bool = False,
    ) -> StepRunner:
        """The one object that runs this platform's steps, chosen from `capabilities.steps`.
        `buckets` (None: `--disable-cuda-graph`) bounds static batch shapes and `limits` their
        static buffers. A captured runner whose backend or collectives cannot be made static
        falls back to the eager one, and the log says why."""
        from sglang.platforms.execution.captured import CapturedStepRunner
        from sglang.platforms.execution.eager import EagerStepRunner

        execution = self.capabilities.steps
        if execution.mode is StepMode.JITTED:
            return self.jitted_step_runner(model, backend, buckets)
        eager = EagerStepRunner(model, backend, self.device())
        if execution.mode is StepMode.EAGER or buckets is None or limits is None:
            logger.info("%s steps run eagerly", self.name)
            return eager
        if tensor_parallel and not execution.static_collectives:
            logger.info("decode steps eager: the %s runtime's static steps cannot hold collectives", self.name)
            return eager
        captured = CapturedStepRunner(eager, self.runtime, buckets, limits)
        if captured.disabled_reason is not None:
            logger.info("decode steps eager: %s", captured.disabled_reason)
            return eager
        logger.info("decode steps captured, buckets %s", buckets.sizes)
        return captured

    def jitted_step_runner(
        self, model: StepModel, backend: AttentionBackend, buckets: BucketPolicy | None
    ) -> StepRunner:
        """The runner of a platform whose steps are compiled functions of their inputs (tpu:
        jitted JAX); required where `capabilities.steps.mode` is `JITTED`."""
        raise NotImplementedError(f"{self.name} declares jitted steps but has no jitted step runner")

    # Checks -----------------------------------------------------------------------------------

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
