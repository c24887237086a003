"""KV memory bookkeeping for the scheduler: which slots of the paged KV pool hold which tokens
(`token_allocator`) and which token prefixes are cached for reuse (`radix_cache`). The bytes live
in the model runner's KV buffers, in the layout the attention backend declares."""

from sglang.runtime.memory.token_allocator import PADDING_SLOT, PagedTokenAllocator

__all__ = ["PADDING_SLOT", "PagedTokenAllocator"]
