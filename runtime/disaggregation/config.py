"""Timeouts of prefill-decode disaggregation, under upstream's environment variable names."""

from __future__ import annotations

import os
from dataclasses import dataclass

MODES = ("null", "prefill", "decode")
TRANSFER_BACKENDS = ("tcp",)
"""Upstream's mooncake, nixl, ascend and mori need RDMA or vendor libraries, not available here."""


@dataclass(frozen=True)
class Timeouts:
    waiting_s: float
    """How long a decode request waits for its KV before it fails (its reserved KV freed)."""
    bootstrap_s: float
    """How long a prefill server keeps a finished room nobody fetched (or a cancel mark)."""

    @classmethod
    def from_env(cls) -> Timeouts:
        return cls(
            waiting_s=float(os.environ.get("SGLANG_DISAGGREGATION_WAITING_TIMEOUT", "300")),
            bootstrap_s=float(os.environ.get("SGLANG_DISAGGREGATION_BOOTSTRAP_TIMEOUT", "300")),
        )
