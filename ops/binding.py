"""Installs the chosen implementation of every op on `sglang.ops`, once, at startup.

Each op has a reference implementation in this package; kernel families offer others by
qualified name (`"package.module:attribute"`), imported only when bound. Which one serves is
decided by `sglang.ops.selection`; `install` puts the chosen callables on `sglang.ops` as
attributes, so a call site (`ops.rms_norm(...)`) pays one attribute lookup and no per-call device
check. `SGLANG_REFERENCE_OPS=1` forces every op to its reference, for debugging and conformance.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang.ops.selection import Candidate, OpTable

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
    "moe_route_grouped": "sglang.ops.moe:moe_route_grouped",
    "moe_route_group_limited": "sglang.ops.moe:moe_route_group_limited",
    "moe_experts": "sglang.ops.moe:moe_experts",
    "lora_shrink": "sglang.ops.lora:lora_shrink",
    "lora_expand": "sglang.ops.lora:lora_expand",
    "apply_penalties": "sglang.ops.sampling:apply_penalties",
    "apply_token_bitmask": "sglang.ops.sampling:apply_token_bitmask",
    "sample": "sglang.ops.sampling:sample",
    "argmax": "sglang.ops.sampling:argmax",
    "log_softmax": "sglang.ops.sampling:log_softmax",
    "attention_backend": "sglang.ops.attention:ReferenceAttention",
    "mla_backend": "sglang.ops.mla:ReferenceMLA",
}
"""Every op name and its reference implementation (`attention_backend` and `mla_backend` are
classes)."""


def resolve(qualname: str) -> Any:
    module_name, _, attr = qualname.partition(":")
    if not attr:
        raise ValueError(f"{qualname!r} is not a qualified name of the form 'package.module:attribute'")
    return getattr(importlib.import_module(module_name), attr)


def force_reference_requested() -> bool:
    return os.environ.get(FORCE_REFERENCE_ENV, "").lower() in ("1", "true", "yes")


def load(candidate: Candidate, tuning: object = None) -> Callable[..., Any]:
    """The callable a candidate names, with the platform's tuning bound when it takes one."""
    impl = resolve(candidate.qualname)
    return partial(impl, tuning=tuning) if candidate.tunable else impl


def install(table: OpTable, tuning: Mapping[str, object] | None = None) -> None:
    """Sets `sglang.ops.<op>` to each chosen candidate; `tuning` maps a family to its settings."""
    ops_module = importlib.import_module("sglang.ops")
    for choice in table.choices:
        setattr(ops_module, choice.op, load(choice.chosen, (tuning or {}).get(choice.chosen.family)))


def snapshot() -> dict[str, Any]:
    """The currently bound implementations, for `restore` (tests bind and unbind)."""
    ops_module = importlib.import_module("sglang.ops")
    return {name: getattr(ops_module, name) for name in REFERENCE_OPS}


def restore(saved: Mapping[str, Any]) -> None:
    ops_module = importlib.import_module("sglang.ops")
    for name, impl in saved.items():
        setattr(ops_module, name, impl)
