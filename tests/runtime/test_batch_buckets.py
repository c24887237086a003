"""The bucket policy static-shape decode steps (graphs, compiled decode, jit) share."""

from __future__ import annotations

import pytest

from sglang.ops.buckets import BucketPolicy


def test_up_to_covers_every_batch_with_bounded_padding() -> None:
    policy = BucketPolicy.up_to(64)
    assert policy.sizes == (1, 2, 4, 8, 16, 24, 32, 48, 64)
    for batch in range(1, 65):
        bucket = policy.bucket_for(batch)
        assert bucket is not None and batch <= bucket <= batch + 16
    assert policy.bucket_for(65) is None


@pytest.mark.parametrize(("max_batch", "sizes"), [(1, (1,)), (3, (1, 2, 3)), (20, (1, 2, 4, 8, 16, 20))])
def test_the_largest_bucket_is_the_maximum(max_batch: int, sizes: tuple[int, ...]) -> None:
    assert BucketPolicy.up_to(max_batch).sizes == sizes


def test_bucket_boundaries() -> None:
    policy = BucketPolicy((2, 8))
    assert [policy.bucket_for(b) for b in (1, 2, 3, 8, 9)] == [2, 2, 8, 8, None]
    with pytest.raises(ValueError):
        policy.bucket_for(0)


@pytest.mark.parametrize("sizes", [(), (4, 2), (2, 2), (0, 4)])
def test_bad_sizes_are_refused(sizes: tuple[int, ...]) -> None:
    with pytest.raises(ValueError):
        BucketPolicy(sizes)
