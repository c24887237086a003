"""Page views of the token-level attention contract, for vendor kernels that read page tables.

`AttentionInputs.kv_slots` lists every token's cache slot, sequence after sequence. With pages of
`page_size` slots (slot `s` is offset `s % page_size` of page `s // page_size`, and a sequence's
token `i` sits at offset `i % page_size`, the allocator's invariant), a sequence's pages are the
pages of its tokens `0, page_size, 2 * page_size, ...`. Two views are derived here, on the host:
a CSR page list (flashinfer, aiter: `indptr`, `indices`, `last_page_len`) and a dense block table
(torch_npu: `[rows, max_blocks]`, padded with block 0). Views are host tensors; callers move
what their kernel reads on the device.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sglang.ops.attention import AttentionInputs


@dataclass(frozen=True)
class CsrPages:
    """Sequence `i` owns pages `indices[indptr[i]:indptr[i + 1]]`; its last page holds
    `last_page_len[i]` tokens (in `[1, page_size]`). All int32, on the host."""

    indptr: torch.Tensor
    indices: torch.Tensor
    last_page_len: torch.Tensor


def _rows(inputs: AttentionInputs, rows: list[int] | None) -> list[int]:
    return list(range(len(inputs.seq_lens))) if rows is None else rows


def sequence_pages(inputs: AttentionInputs, row: int, page_size: int) -> torch.Tensor:
    """The pages of sequence `row`, in order (int64, host)."""
    starts = inputs.kv_starts
    slots = inputs.kv_slots[starts[row] : starts[row + 1]].cpu()
    if page_size > 1 and slots.numel() and bool((slots[::page_size] % page_size).any()):
        raise ValueError(f"sequence {row} does not start its pages at offset 0 (page size {page_size})")
    return slots[::page_size] // page_size


def csr_pages(inputs: AttentionInputs, page_size: int, rows: list[int] | None = None) -> CsrPages:
    """The CSR page view of `rows` (default: every sequence), in that order."""
    chosen = _rows(inputs, rows)
    pages = [sequence_pages(inputs, i, page_size) for i in chosen]
    counts = torch.tensor([0, *(p.numel() for p in pages)], dtype=torch.int64)
    last = [inputs.seq_lens[i] - (p.numel() - 1) * page_size for i, p in zip(chosen, pages)]
    return CsrPages(
        indptr=counts.cumsum(0).to(torch.int32),
        indices=(torch.cat(pages) if pages else torch.zeros(0, dtype=torch.int64)).to(torch.int32),
        last_page_len=torch.tensor(last, dtype=torch.int32),
    )


def block_table(
    inputs: AttentionInputs, page_size: int, width: int | None = None, rows: list[int] | None = None
) -> torch.Tensor:
    """`[len(rows), width]` int32: row `r`'s blocks, then block 0 as padding (masked by the
    sequence lengths the kernel also gets). `width` defaults to the longest row's block count."""
    chosen = _rows(inputs, rows)
    pages = [sequence_pages(inputs, i, page_size) for i in chosen]
    need = max((p.numel() for p in pages), default=0)
    width = need if width is None else width
    if need > width:
        raise ValueError(f"a sequence needs {need} blocks, the table holds {width}")
    table = torch.zeros(len(chosen), width, dtype=torch.int32)
    for r, p in enumerate(pages):
        table[r, : p.numel()] = p.to(torch.int32)
    return table
