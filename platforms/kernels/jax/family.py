"""The jax family: kernels in jax.numpy for the tpu platform (through torchax), Pallas on a TPU.

The jax.numpy kernels run wherever JAX does (a TPU, or XLA:CPU for the tpu platform's runs
on machines without one). The Pallas kernel needs a TPU: it requires `libtpu`, the package a TPU
host has, and is never run in Pallas' interpreter (tpu-inference's kernel does not run there).
"""

from sglang.ops.selection import Candidate, Requirements
from sglang.platforms.kernels.registry import KernelFamily

_HERE = "sglang.platforms.kernels.jax"
_JAX = ("jax", "torchax")

FAMILY = KernelFamily(
    name="jax",
    description="jax.numpy ragged paged attention (tpu-inference's contract, sinks too) and absorbed MLA on it, "
    "multi-LoRA; "
    "Pallas on a TPU",
    candidates=(
        Candidate(
            "attention_backend",
            "jax",
            f"{_HERE}.pallas_attention:PallasRaggedAttention",
            Requirements(packages=(*_JAX, "libtpu"), head_dims=frozenset({128, 256})),
            priority=1,
        ),
        Candidate(
            "attention_backend",
            "jax",
            f"{_HERE}.attention:RaggedPagedAttention",
            # The Pallas kernel above takes no sinks: a model with them binds this one on a TPU too.
            Requirements(packages=_JAX, features=frozenset({"sinks"})),
        ),
        Candidate("mla_backend", "jax", f"{_HERE}.mla:RaggedAbsorbedMLA", Requirements(packages=_JAX)),
        Candidate("lora_shrink", "jax", f"{_HERE}.lora:lora_shrink", Requirements(packages=_JAX)),
        Candidate("lora_expand", "jax", f"{_HERE}.lora:lora_expand", Requirements(packages=_JAX)),
    ),
)
