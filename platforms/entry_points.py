"""Out-of-tree registrations (platforms, kernel families) read from package entry points."""

from __future__ import annotations

import logging
from collections.abc import Collection
from importlib.metadata import entry_points

logger = logging.getLogger(__name__)


def registered(group: str, builtin: Collection[str], what: str) -> dict[str, str]:
    """Name -> qualified name of every entry point in `group`; a built-in name cannot be taken."""
    found = {}
    for ep in entry_points(group=group):
        if ep.name in builtin:
            logger.warning("ignoring entry point %s: %r is a built-in %s", ep.value, ep.name, what)
            continue
        found[ep.name] = ep.value
    return found
