"""Importing torchax 0.0.13 under a torch without named-tensor overloads.

torchax 0.0.13 (the newest release) names overloads such as `aten.prod.dim_Dimname` and
`aten.unbind.Dimname` in its autocast policy and decomposition tables; torch 2.13 removed the
named-tensor overloads, so the plain import raises AttributeError. torchax PR 102, merged on its
main branch, fixes this; no release carries it yet. Until a release carries
it, `import_torchax` first tries the plain import and only if that fails with this error retries
it (and the lazy decomposition load of the first `torchax.default_env()`) while a failed lookup
of such an overload answers None: those table entries are then inert, since no op dispatches to
an overload torch no longer has. Drop this module once a fixed torchax is released.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from types import ModuleType

import torch

UPSTREAM_FIX = "torchax PR 102 (main branch): no lookups of the removed named-tensor overloads"

_state: dict[str, bool] = {}


def is_named_tensor_overload(name: str) -> bool:
    """The overloads torch removed with named tensors: `*Dimname*`, `*dimname*`, `names_*`."""
    lowered = name.lower()
    return "dimname" in lowered or "names" in lowered


@contextlib.contextmanager
def named_overloads_answer_none() -> Iterator[None]:
    """While active, a missing named-tensor overload on any op packet reads as None; every other
    lookup (present overloads, other missing names) behaves exactly as before."""
    packet = torch._ops.OpOverloadPacket
    original = packet.__getattr__

    def lookup(self: torch._ops.OpOverloadPacket, key: str) -> object:
        try:
            return original(self, key)
        except AttributeError:
            if is_named_tensor_overload(key):
                return None
            raise

    packet.__getattr__ = lookup
    try:
        yield
    finally:
        packet.__getattr__ = original


def _is_removed_overload_error(exc: BaseException) -> bool:
    message = str(exc)
    return "has no overload name" in message and any(
        is_named_tensor_overload(part) for part in message.replace("'", " ").split()
    )


def _forget_partial_import() -> None:
    for name in [m for m in sys.modules if m == "torchax" or m.startswith("torchax.")]:
        del sys.modules[name]


def import_torchax() -> ModuleType:
    """torchax, imported and its default environment built; the compatibility step only when the
    plain import fails on a removed named-tensor overload (any other failure propagates)."""
    try:
        import torchax

        torchax.default_env()
        _state.setdefault("compat", False)
        return torchax
    except AttributeError as exc:
        if not _is_removed_overload_error(exc):
            raise
    _forget_partial_import()
    with named_overloads_answer_none():
        import torchax

        torchax.default_env()
    _state["compat"] = True
    return torchax


def compat_applied() -> bool | None:
    """Whether the last successful import needed the compatibility step (None: not imported yet)."""
    return _state.get("compat")
