"""Binds every op name to one implementation, once, at startup.

Each op has a reference implementation in this package. A platform offers native ones by
qualified name (`"package.module:attribute"`), imported only when bound. `bind` installs the
chosen callables as attributes of `sglang.ops`, so a call site (`ops.rms_norm(...)`) pays one
attribute lookup and no per-call device check. `SGLANG_REFERENCE_OPS=1` (or
`force_reference=True`) binds every op to its reference, for debugging and conformance.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

FORCE_REFERENCE_ENV = "SGLANG_REFERENCE_OPS"

REFERENCE_OPS: dict[str, str] = {
    "embedding": "sglang.ops.linear:embedding",
    "linear": "sglang.ops.linear:linear",
    "rms_norm": "sglang.ops.norm:rms_norm",
    "fused_add_rms_norm": "sglang.ops.norm:fused_add_rms_norm",
    "silu_and_mul": "sglang.ops.activation:silu_and_mul",
    "gelu_and_mul": "sglang.ops.activation:gelu_and_mul",
    "apply_rotary": "sglang.ops.rotary:apply_rotary",
    "store_kv": "sglang.ops.kv_store:store_kv",
    "moe_route": "sglang.ops.moe:moe_route",
    "moe_experts": "sglang.ops.moe:moe_experts",
    "apply_penalties": "sglang.ops.sampling:apply_penalties",
    "apply_token_bitmask": "sglang.ops.sampling:apply_token_bitmask",
    "sample": "sglang.ops.sampling:sample",
    "log_softmax": "sglang.ops.sampling:log_softmax",
    "attention_backend": "sglang.ops.attention:ReferenceAttention",
    "device_runtime": "sglang.ops.device:DeviceRuntime",
}
"""Every op name and its reference. A platform's table may name any subset of these keys."""


@dataclass(frozen=True)
class OpBinding:
    name: str
    qualname: str
    native: bool


def resolve(qualname: str) -> Any:
    module_name, _, attr = qualname.partition(":")
    if not attr:
        raise ValueError(f"{qualname!r} is not a qualified name of the form 'package.module:attribute'")
    return getattr(importlib.import_module(module_name), attr)


def force_reference_requested() -> bool:
    return os.environ.get(FORCE_REFERENCE_ENV, "").lower() in ("1", "true", "yes")


def bind(native_ops: Mapping[str, str], owner: str, force_reference: bool | None = None) -> list[OpBinding]:
    """Installs one implementation per op on `sglang.ops` and returns what was chosen.

    `owner` names the platform in the log line that lists ops falling back to the reference.
    """
    unknown = set(native_ops) - set(REFERENCE_OPS)
    if unknown:
        raise KeyError(f"{owner} names ops that do not exist: {sorted(unknown)}")
    if force_reference is None:
        force_reference = force_reference_requested()
    ops_module = importlib.import_module("sglang.ops")
    bindings = []
    for name, reference in REFERENCE_OPS.items():
        native = not force_reference and name in native_ops
        qualname = native_ops[name] if native else reference
        setattr(ops_module, name, resolve(qualname))
        bindings.append(OpBinding(name=name, qualname=qualname, native=native))
    fallbacks = [b.name for b in bindings if not b.native]
    if force_reference:
        logger.info("%s: every op forced to its reference implementation (%s)", owner, FORCE_REFERENCE_ENV)
    elif fallbacks:
        logger.info("%s: reference implementation used for %s", owner, ", ".join(fallbacks))
    return bindings
