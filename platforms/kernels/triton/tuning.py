"""Launch settings the Triton kernels take from the platform (never from globals).

Importing this module does not import triton: platforms declare their tuning at class level on
machines without it. Block sizes that feed `tl.dot` must be at least 16 (GPUs reject smaller dot
shapes) and powers of two.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TritonTuning:
    num_warps: int = 4
    num_stages: int = 2
    decode_block_n: int = 64
    """KV positions one decode program reads per iteration."""
    decode_kv_splits: int = 8
    """Split-KV partitions per (sequence, KV head) in decode, merged by log-sum-exp."""
    extend_block_m: int = 32
    """Query rows per extend program."""
    extend_block_n: int = 32
    """KV positions per extend iteration."""
    moe_block_m: int = 64
    """(token, expert) pairs per grouped-GEMM tile; each expert's pairs are padded to a multiple."""
    moe_block_n: int = 64
    """Output columns per grouped-GEMM tile."""
    moe_block_k: int = 32
    """Reduction depth per grouped-GEMM iteration."""
    elementwise_block: int = 1024
    """Elements per program along a row in the gated activations."""
    store_tile: int = 4096
    """Key (and value) elements one KV-store program moves: whole tokens, at least one."""
    waves_per_eu: int | None = None
    """AMD (HIP) occupancy hint; passed to launches only when set."""

    def launch_options(self) -> dict[str, int]:
        options = {"num_warps": self.num_warps, "num_stages": self.num_stages}
        if self.waves_per_eu is not None:
            options["waves_per_eu"] = self.waves_per_eu
        return options


def resolve(tuning: TritonTuning | None) -> TritonTuning:
    """The settings to launch with: the platform's, or the defaults when it gave none."""
    return tuning if tuning is not None else TritonTuning()
