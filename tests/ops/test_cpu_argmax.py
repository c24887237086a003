"""cpu_cpp's argmax against torch.argmax on the rows its vector path splits differently: widths
around its 32-value blocks (a row is whole blocks then a scalar tail), maxima tied across lanes
and blocks, NaNs in the blocks and in the tail, views, inference tensors and batches split over
threads. The op parity suite holds it to the reference on a few shapes; these cover the edges.
"""

from __future__ import annotations

import pytest
import torch

from sglang.platforms.kernels.cpu_cpp import sampling
from sglang.platforms.kernels.cpu_cpp.build import build_failure

pytestmark = pytest.mark.skipif(build_failure() is not None, reason="the cpu_cpp kernels did not build")

WIDTHS = (*range(1, 130), 1000, 4096, 49152)


def expect_torchs(logits: torch.Tensor) -> None:
    assert torch.equal(sampling.argmax(logits), logits.argmax(dim=-1)), logits


@pytest.mark.parametrize("width", WIDTHS)
def test_random_and_tied_rows(width: int) -> None:
    gen = torch.Generator().manual_seed(width)
    expect_torchs(torch.randn(3, width, generator=gen))
    # Values from {-2..1}: the maximum recurs in many lanes and blocks; the lowest index wins.
    expect_torchs(torch.randint(-2, 2, (3, width), generator=gen).float())
    expect_torchs(torch.zeros(2, width).index_fill_(1, torch.arange(0, width, 3), -0.0))


@pytest.mark.parametrize("width", (1, 31, 32, 33, 64, 95, 96, 100, 1000))
def test_the_first_nan_wins_wherever_it_is(width: int) -> None:
    for first in sorted({0, width // 3, width - 1, max(0, width - 5)}):
        logits = torch.randn(2, width, generator=torch.Generator().manual_seed(first))
        logits[0, first] = float("nan")
        logits[1, first:] = float("nan")
        logits[1, :first] = float("inf")
        expect_torchs(logits)


def test_masked_rows_views_and_batches() -> None:
    expect_torchs(torch.full((2, 1000), float("-inf")))
    wide = torch.randn(8, 3000)
    expect_torchs(wide[::2])
    expect_torchs(wide[:, 1000:2000])
    with torch.inference_mode():
        frozen = torch.randn(3, 49152)
    expect_torchs(frozen)
    # Enough values for several threads' tasks, and many small rows in one task.
    expect_torchs(torch.randn(67, 49152))
    expect_torchs(torch.randn(2000, 100))
    assert sampling.argmax(torch.empty(0, 10)).shape == (0,)


def test_refuses_what_it_does_not_serve() -> None:
    for logits in (torch.randn(2, 8, dtype=torch.float64), torch.randn(8), torch.empty(2, 0)):
        with pytest.raises(RuntimeError, match="argmax"):
            sampling.argmax(logits)
