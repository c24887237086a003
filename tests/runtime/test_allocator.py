"""PagedTokenAllocator: page-wise fill, all-or-nothing batches, page release, double frees."""

import pytest
import torch

from sglang.runtime.memory import PADDING_SLOT, PagedTokenAllocator


def test_page_size_one_hands_out_slots_and_never_the_padding_slot():
    alloc = PagedTokenAllocator(num_pages=5, page_size=1)
    assert alloc.available_tokens() == 4
    slots = alloc.alloc_extend(None, 4)
    assert sorted(slots.tolist()) == [1, 2, 3, 4]
    assert PADDING_SLOT not in slots.tolist()
    assert alloc.alloc_extend(int(slots[-1]), 1) is None
    alloc.free(slots[:2])
    assert alloc.num_free_pages == 2


def test_sequence_fills_its_last_page_before_taking_a_new_one():
    alloc = PagedTokenAllocator(num_pages=4, page_size=4)
    first = alloc.alloc_extend(None, 3)
    assert first.tolist() == [4, 5, 6]
    grown = alloc.alloc_extend(int(first[-1]), 4)
    assert grown.tolist() == [7, 8, 9, 10]
    assert alloc.num_free_pages == 1
    decode = alloc.alloc_extend(int(grown[-1]), 1)
    assert decode.tolist() == [11]
    assert alloc.num_free_pages == 1


def test_token_i_of_a_sequence_sits_at_offset_i_mod_page_size():
    alloc = PagedTokenAllocator(num_pages=20, page_size=4)
    slots = alloc.alloc_extend(None, 1)
    for n in [2, 5, 1, 1, 7, 3]:
        slots = torch.cat([slots, alloc.alloc_extend(int(slots[-1]), n)])
    positions = torch.arange(len(slots))
    assert torch.equal(slots % 4, positions % 4)
    assert torch.equal(slots // 4, (slots // 4)[positions - positions % 4])  # pages are whole runs


def test_batch_is_packed_in_order_and_all_or_nothing():
    alloc = PagedTokenAllocator(num_pages=4, page_size=2)
    a = alloc.alloc_extend(None, 1)
    out = alloc.alloc_extend_batch([int(a[-1]), None], [1, 3])
    assert out.tolist()[:1] == [int(a[-1]) + 1]
    assert len(out) == 4 and alloc.num_free_pages == 0
    assert alloc.pages_needed([int(out[0]), int(out[-1])], [1, 1]) == 1  # the second has room
    assert alloc.alloc_extend_batch([int(out[0]), int(out[-1])], [1, 1]) is None
    assert alloc.num_free_pages == 0 and len(alloc.allocated_slots()) == 5


def test_page_returns_only_when_all_its_slots_are_freed():
    alloc = PagedTokenAllocator(num_pages=3, page_size=4)
    slots = alloc.alloc_extend(None, 4)
    alloc.free(slots[:3])
    assert alloc.num_free_pages == 1
    alloc.free(slots[3:])
    assert alloc.num_free_pages == 2
    assert alloc.allocated_slots().numel() == 0


@pytest.mark.parametrize("page_size", [1, 4])
def test_double_free_raises(page_size):
    alloc = PagedTokenAllocator(num_pages=4, page_size=page_size)
    slots = alloc.alloc_extend(None, 3)
    alloc.free(slots)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(slots[:1])
    again = alloc.alloc_extend(None, 2)
    with pytest.raises(ValueError, match="double free"):
        alloc.free(torch.cat([again[:1], again[:1]]))
    with pytest.raises(ValueError, match="padding"):
        alloc.free([PADDING_SLOT])


def test_growing_from_a_slot_that_is_not_a_sequence_end_raises():
    alloc = PagedTokenAllocator(num_pages=4, page_size=4)
    slots = alloc.alloc_extend(None, 3)
    with pytest.raises(ValueError, match="not the last slot"):
        alloc.alloc_extend(int(slots[0]), 1)
    with pytest.raises(ValueError, match="not the last slot"):
        alloc.alloc_extend_batch([int(slots[-1]), int(slots[-1])], [1, 1])
    with pytest.raises(ValueError, match="not allocated"):
        alloc.alloc_extend(13, 1)
    assert alloc.num_free_pages == 2  # failed calls took nothing


def test_clear_frees_everything():
    alloc = PagedTokenAllocator(num_pages=3, page_size=2)
    alloc.alloc_extend(None, 3)
    alloc.clear()
    assert alloc.num_free_pages == 2 and alloc.available_tokens() == 4
