"""A heterogeneous prefill-decode pair behind smg 1.13: prefill on the cpu platform, decode on
the tpu platform on XLA:CPU (`JAX_PLATFORMS=cpu`; labelled so, no TPU is involved). The KV
crosses from cpu's `[2, n, Hk, D]` layout to the jax backend's `[n, 1, 2*Hk, D]` through the
portable form. Greedy tokens through smg equal those of a unified cpu server (the prefill
server answering the same requests without bootstrap fields).

Slow: the tpu server compiles its steps on XLA:CPU (minutes on a shared 2-core machine)."""

from __future__ import annotations

import pytest

from sglang.ci.servers import ServerGroup

from ..clients.venvs import Venv
from .pd_fleet import PROMPTS, generate, kv_status, start_pd_fleet

XLA_CPU_REQUEST_TIMEOUT_S = 900
"""The first request took about 2 minutes by hand on a loaded machine (its steps compiling)."""


@pytest.mark.slow
def test_cpu_prefill_to_tpu_decode_gives_the_same_greedy_tokens(services: ServerGroup, smg_venv: Venv) -> None:
    fleet = start_pd_fleet(services, smg_venv, decode_device="tpu")
    assert fleet.router is not None
    assert fleet.decode.server_info()["device"] == "tpu"
    for text in PROMPTS:
        unified = generate(fleet.prefill, text)
        through = generate(fleet.router, text, timeout=XLA_CPU_REQUEST_TIMEOUT_S)
        assert through["output_ids"] == unified["output_ids"], (text, through, unified)
    status = kv_status(fleet.decode)
    assert status["kv_transfers_received"] == len(PROMPTS) and status["kv_transfers_failed"] == 0
