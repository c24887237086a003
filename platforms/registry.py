"""Finding and selecting a platform.

Built-in platforms are named by qualified class name and imported only when asked about, so a
machine without CUDA or JAX imports this module fine. Out-of-tree platforms register a class
under the entry-point group `sglang.platforms` (`name = "package.module:Class"`); a built-in
name cannot be overridden.

`--device auto` picks the first available platform in `AUTO_PRIORITY`: accelerators from the
most to the least common (cuda, rocm, xpu, npu, tpu), then out-of-tree platforms in name order,
and cpu last, which is always available.
"""

from __future__ import annotations

import logging
from functools import cache

from sglang.ops.binding import resolve
from sglang.platforms.base import Platform, PlatformError
from sglang.platforms.entry_points import registered

logger = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "sglang.platforms"

BUILTIN_PLATFORMS: dict[str, str] = {
    "cpu": "sglang.platforms.cpu.platform:CpuPlatform",
    "cuda": "sglang.platforms.cuda.platform:CudaPlatform",
    "rocm": "sglang.platforms.rocm.platform:RocmPlatform",
    "xpu": "sglang.platforms.xpu.platform:XpuPlatform",
    "npu": "sglang.platforms.npu.platform:NpuPlatform",
    "tpu": "sglang.platforms.tpu.platform:TpuPlatform",
}

AUTO_PRIORITY: tuple[str, ...] = ("cuda", "rocm", "xpu", "npu", "tpu")
"""Accelerators tried by `auto` before out-of-tree platforms and, last, cpu."""


@cache
def _out_of_tree() -> dict[str, str]:
    return registered(ENTRY_POINT_GROUP, BUILTIN_PLATFORMS, "platform")


def known_platforms() -> dict[str, str]:
    """Every selectable platform name and the qualified name of its class."""
    return {**BUILTIN_PLATFORMS, **_out_of_tree()}


def platform_class(name: str) -> type[Platform]:
    known = known_platforms()
    if name not in known:
        raise PlatformError(f"unknown device {name!r} (known: auto, {', '.join(known)})")
    cls = resolve(known[name])
    if not (isinstance(cls, type) and issubclass(cls, Platform)):
        raise PlatformError(f"{known[name]} is not a Platform subclass")
    return cls


def auto_order() -> list[str]:
    extra = sorted(set(_out_of_tree()))
    return [*AUTO_PRIORITY, *extra, "cpu"]


def select_platform(device: str = "auto") -> Platform:
    """The platform for `--device`; fails with the reason when an explicit one is unavailable."""
    if device != "auto":
        cls = platform_class(device)
        availability = cls.availability()
        if not availability.available:
            raise PlatformError(f"{device}: {availability.reason}")
        return cls()
    reasons = []
    for name in auto_order():
        cls = platform_class(name)
        availability = cls.availability()
        if availability.available:
            logger.info("device auto: selected %s", name)
            return cls()
        reasons.append(f"{name}: {availability.reason}")
    raise PlatformError("no platform is available: " + "; ".join(reasons))
