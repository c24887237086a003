"""The Triton kernels under non-default tuning: small tiles and few splits put the loop and
split boundaries inside the parity cases' short sequences (several decode blocks per split, a
key-block loop cut by the window, several GEMM tiles), which the default tuning never reaches.

Runs where Triton can launch: under `TRITON_INTERPRET=1` on cpu tensors (set before triton is
imported), or on a GPU.
"""

from __future__ import annotations

import os
import zlib

import pytest
import torch

from sglang.ci.suites.devices import ORACLE_DEVICE, to_device
from sglang.ci.suites.op_cases import CASES
from sglang.ops.binding import REFERENCE_OPS, load, resolve
from sglang.platforms.kernels.triton.family import FAMILY
from sglang.platforms.kernels.triton.tuning import TritonTuning

INTERPRETED = os.environ.get("TRITON_INTERPRET", "") == "1"
DEVICE = torch.device("cpu") if INTERPRETED else torch.device("cuda") if torch.cuda.is_available() else None
pytestmark = pytest.mark.skipif(DEVICE is None, reason="Triton cannot launch here: no GPU and TRITON_INTERPRET!=1")

TUNINGS = {
    "small": TritonTuning(
        decode_block_n=16,
        decode_kv_splits=3,
        extend_block_m=16,
        extend_block_n=16,
        moe_block_m=16,
        moe_block_n=16,
        moe_block_k=16,
        elementwise_block=16,
        store_tile=64,
    ),
    "one_split": TritonTuning(decode_block_n=16, decode_kv_splits=1, extend_block_m=16, extend_block_n=32),
}
CASE_IDS = (
    "attention_backend-long-gqa8_window-page16",
    "attention_backend-long-gqa-page1",
    "attention_backend-mixed-softcap-page16",
    "moe_experts-e8_top2",
    "silu_and_mul-9x56",
)
CANDIDATES = {c.op: c for c in FAMILY.candidates}


@pytest.mark.parametrize("case_id", CASE_IDS)
@pytest.mark.parametrize("tuning_name", TUNINGS)
def test_triton_tuning(tuning_name: str, case_id: str) -> None:
    case = next(c for c in CASES if c.id == case_id)
    dtype = torch.float32
    args = case.make(torch.Generator().manual_seed(zlib.crc32(case_id.encode())), dtype)
    expected = case.call(resolve(REFERENCE_OPS[case.op]), to_device(args, ORACLE_DEVICE))
    actual = case.call(load(CANDIDATES[case.op], TUNINGS[tuning_name]), to_device(args, DEVICE))
    case.check(actual, expected, args, dtype)
