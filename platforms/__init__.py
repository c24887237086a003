"""Platforms: the `Platform` contract, the registry, and one package per device."""

from sglang.platforms.base import Availability, Capabilities, Platform, PlatformError
from sglang.platforms.registry import AUTO_PRIORITY, known_platforms, platform_class, select_platform

__all__ = [
    "AUTO_PRIORITY",
    "Availability",
    "Capabilities",
    "Platform",
    "PlatformError",
    "known_platforms",
    "platform_class",
    "select_platform",
]
