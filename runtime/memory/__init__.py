"""KV-slot bookkeeping for the scheduler: which slots of the paged KV pool hold which tokens."""

from sglang.runtime.memory.token_allocator import PADDING_SLOT, PagedTokenAllocator

__all__ = ["PADDING_SLOT", "PagedTokenAllocator"]
