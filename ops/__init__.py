"""The typed op interface every model and the runtime call; platforms provide implementations.

Call ops through the module (`from sglang import ops; ops.rms_norm(...)`), never by importing
the function, so the implementation chosen at startup (`Platform.bind_ops`, which selects among
kernel candidates and calls `install`) is the one called. Until a platform binds, every name is
its reference implementation.
"""

from sglang.ops.activation import gelu_and_mul, silu_and_mul
from sglang.ops.attention import (
    AttentionBackend,
    AttentionInputs,
    AttentionLayer,
    AttentionMetadata,
    ReferenceAttention,
)
from sglang.ops.binding import REFERENCE_OPS, install
from sglang.ops.collectives import Communicator, SingleProcessCommunicator, TorchDistributedCommunicator
from sglang.ops.kv_store import store_kv
from sglang.ops.linear import embedding, linear
from sglang.ops.lora import lora_expand, lora_shrink
from sglang.ops.mla import MLABackend, ReferenceMLA
from sglang.ops.moe import moe_experts, moe_route, moe_route_group_limited, moe_route_grouped
from sglang.ops.norm import fused_add_rms_norm, rms_norm
from sglang.ops.rotary import RopeScaling, RotaryTable, apply_rotary
from sglang.ops.sampling import SamplingTensors, apply_penalties, apply_token_bitmask, argmax, log_softmax, sample

attention_backend: type[AttentionBackend] = ReferenceAttention
mla_backend: type[MLABackend] = ReferenceMLA

__all__ = [
    "REFERENCE_OPS",
    "AttentionBackend",
    "AttentionInputs",
    "AttentionLayer",
    "AttentionMetadata",
    "Communicator",
    "MLABackend",
    "ReferenceAttention",
    "ReferenceMLA",
    "RopeScaling",
    "RotaryTable",
    "SamplingTensors",
    "SingleProcessCommunicator",
    "TorchDistributedCommunicator",
    "apply_penalties",
    "apply_rotary",
    "apply_token_bitmask",
    "argmax",
    "attention_backend",
    "embedding",
    "fused_add_rms_norm",
    "gelu_and_mul",
    "install",
    "linear",
    "log_softmax",
    "lora_expand",
    "lora_shrink",
    "mla_backend",
    "moe_experts",
    "moe_route",
    "moe_route_group_limited",
    "moe_route_grouped",
    "rms_norm",
    "sample",
    "silu_and_mul",
    "store_kv",
]
