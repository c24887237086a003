"""The hierarchical KV cache: the device pool's radix tree, backed by the file storage tier.

Prefixes whose pages leave the device pool (evicted), or that are written through as soon as
they are cached, are kept as blocks in the storage tier (runtime/memory/page_store.py). When a
request is admitted its prefix is matched in the device tree first; the whole blocks that follow
the device match are looked up in storage, loaded into freshly allocated pool slots before the
request's prefill, and inserted into the tree, so the request (and `cached_tokens`) sees them as
cached. There is no host tier between the pool and storage: on cpu the pool is host memory
already.

Write policies (upstream's `--hicache-write-policy`):
- write_through: a request's whole blocks are stored when it hands its KV to the tree;
- write_through_selective: a prefix's blocks are stored once a second request reuses it;
- write_back: blocks are stored only when their pages are evicted from the pool.
Under every policy an evicted page that is not stored yet is stored on its way out.

Invariants: a block is stored only from slots the tree or its request holds, before they are
freed; loaded slots are owned by the tree once inserted (or freed if the tree already had them);
`stats` only grow.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.page_store import FilePageStore, block_keys
from sglang.runtime.memory.radix_cache import FreeFn, MatchResult, RadixCache, TreeNode
from sglang.runtime.memory.token_allocator import PagedTokenAllocator

if TYPE_CHECKING:
    from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
DEFAULT_STORAGE_DIR = "/tmp/hicache"
DEFAULT_BLOCK_TOKENS = 64
"""Tokens per stored block unless the extra config's `block_tokens` says otherwise (rounded up
to whole pages): one file per block, so small blocks mean many small files."""


@dataclass(frozen=True)
class HiCacheConfig:
    storage_dir: Path
    block_tokens: int
    write_policy: str

    @classmethod
    def from_args(cls, args: ServerArgs) -> HiCacheConfig | None:
        """The storage tier's settings, or None when the server runs without one. The folder:
        the extra config's `storage_dir`, else `$SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`, else
        /tmp/hicache (upstream's file backend's order)."""
        if not args.enable_hierarchical_cache or args.hicache_storage_backend is None:
            return None
        extra = args.hicache_extra_config()
        folder = extra.get("storage_dir") or os.environ.get(STORAGE_DIR_ENV) or DEFAULT_STORAGE_DIR
        block = int(extra.get("block_tokens", DEFAULT_BLOCK_TOKENS))
        block = -(-block // args.page_size) * args.page_size
        return cls(Path(folder), block, args.hicache_write_policy)


@dataclass
class TierStats:
    """What the storage tier did (the tokens it served are the scheduler's `storage_hit_tokens`)."""

    storage_blocks_written: int = 0
    storage_blocks_read: int = 0
    storage_blocks_rejected: int = 0
    storage_write_errors: int = 0


def model_identity(model: torch.nn.Module, config: dict, layout: Sequence[int], dtype: torch.dtype) -> str:
    """A name for "this model's KV": its config, KV layout and dtype, and a sample of every
    weight's values (two servers of one checkpoint agree; a model with other weights, even of
    the same architecture, does not)."""
    digest = hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode())
    digest.update(f"|{tuple(layout)}|{dtype}".encode())
    for name, tensor in _weights(model):
        flat = tensor.detach().reshape(-1)
        sample = torch.cat([flat[:16], flat[-16:]]) if flat.numel() > 32 else flat
        digest.update(f"|{name}|{tuple(tensor.shape)}|{tensor.dtype}|".encode())
        digest.update(repr(sample.tolist()).encode())  # exact for every dtype, on any device
    return digest.hexdigest()[:32]


def _weights(model: torch.nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The state dict, and the tensors of weights kept outside it (a quantized weight is an
    object holding its packed data and scales as plain attributes)."""
    found = dict(model.state_dict())
    for prefix, module in model.named_modules():
        for attr, value in vars(module).items():
            if attr.startswith("_"):
                continue
            held = vars(value).items() if hasattr(value, "__dataclass_fields__") else [("", value)]
            for field_name, tensor in held:
                if isinstance(tensor, torch.Tensor):
                    found.setdefault(f"{prefix}.{attr}.{field_name}", tensor)
    return sorted(found.items())


class HierarchicalCache:
    def __init__(
        self,
        config: HiCacheConfig,
        cache: RadixCache,
        allocator: PagedTokenAllocator,
        io: KVPageIO,
        store: FilePageStore,
        free_fn: FreeFn,
    ) -> None:
        if config.block_tokens % allocator.page_size:
            raise ValueError(f"block_tokens {config.block_tokens} is not a multiple of the page size")
        self.config = config
        self.cache = cache
        self.allocator = allocator
        self.io = io
        self.store = store
        self.free_fn = free_fn
        self.block_tokens = config.block_tokens
        self.dtype = io.runner.kv_buffers[0].dtype
        self._stored: set[str] = set()  # keys known to be on disk: skips a stat per block
        cache.on_evict = self._on_evict

    @property
    def stats(self) -> TierStats:
        s = self.store.stats
        return TierStats(s.blocks_written, s.blocks_read, s.blocks_rejected, s.write_errors)

    # -- storing -----------------------------------------------------------------------------
    def store_prefix(self, token_ids: Sequence[int], slots: torch.Tensor) -> None:
        """Stores every whole block of `token_ids` (whose KV is at `slots`) not stored yet."""
        keys = block_keys(self.store.model_id, token_ids, self.block_tokens)
        for i, key in enumerate(keys):
            if key in self._stored:
                continue
            if self.store.contains(key):
                self._stored.add(key)
                continue
            start, end = i * self.block_tokens, (i + 1) * self.block_tokens
            block = self.io.read(slots[start:end])
            if self.store.save(key, keys[i - 1] if i else "", token_ids[start:end], block):
                self._stored.add(key)

    def on_cached(self, token_ids: Sequence[int], slots: torch.Tensor) -> None:
        """A request hands its computed KV to the tree (write_through stores it now)."""
        if self.config.write_policy == "write_through":
            self.store_prefix(token_ids, slots)

    def on_hit(self, match: MatchResult, token_ids: Sequence[int]) -> None:
        """A request was admitted reusing `match` (write_through_selective stores reused prefixes)."""
        if self.config.write_policy == "write_through_selective" and match.last_node.hit_count >= 2:
            self.store_prefix(token_ids[: match.num_cached], match.slots)

    def _on_evict(self, node: TreeNode) -> None:
        tokens = self.cache.prefix_tokens(node)
        if len(tokens) < self.block_tokens:
            return
        parts, walk = [], node
        while walk is not self.cache.root:
            parts.append(walk.slots)
            walk = walk.parent
        self.store_prefix(tokens, torch.cat(parts[::-1]))

    # -- loading -----------------------------------------------------------------------------
    def load_prefix(self, token_ids: Sequence[int], match: MatchResult) -> MatchResult:
        """Extends the device `match` of `token_ids` with the stored blocks that follow it,
        loaded into the pool and cached in the tree; returns the new match (the old one if
        storage has nothing more, or the pool has no room)."""
        b = self.block_tokens
        keys = block_keys(self.store.model_id, token_ids, b)
        first = match.num_cached // b
        blocks = []
        for i in range(first, len(keys)):
            tokens = token_ids[i * b : (i + 1) * b]
            block = self.store.load(keys[i], keys[i - 1] if i else "", tokens, self.dtype, self.io.block_shape(b))
            if block is None:
                self._stored.discard(keys[i])
                break
            self._stored.add(keys[i])
            blocks.append(block)
        if not blocks:
            return match
        end = (first + len(blocks)) * b
        count = end - match.num_cached
        slots = self._allocate(match, count)
        if slots is None:
            return match
        axis = self.io.axis + 1
        self.io.write(slots, torch.cat(blocks, dim=axis).narrow(axis, match.num_cached - first * b, count))
        present = self.cache.insert(token_ids[:end], torch.cat([match.slots, slots]))
        self.free_fn(slots[: max(present - match.num_cached, 0)])  # the tree had those already
        logger.info(
            "prefix of %d tokens: %d from the device pool, %d loaded from storage (%d blocks)",
            end,
            match.num_cached,
            count,
            len(blocks),
        )
        return self.cache.match_prefix(token_ids[:end])

    def _allocate(self, match: MatchResult, count: int) -> torch.Tensor | None:
        """Pool slots for `count` tokens after `match`, evicting other cached prefixes (never
        the match itself) when the free pages do not suffice."""
        last = int(match.slots[-1]) if match.num_cached else None
        short = self.allocator.pages_needed([last], [count]) - self.allocator.num_free_pages
        if short > 0:
            self.cache.inc_lock_ref(match.last_node)
            self.cache.evict(short * self.allocator.page_size, self.free_fn)
            self.cache.dec_lock_ref(match.last_node)
        return self.allocator.alloc_extend(last, count)


def build_hierarchical_cache(
    args: ServerArgs, cache: RadixCache, allocator: PagedTokenAllocator, runner: object, free_fn: FreeFn
) -> HierarchicalCache | None:
    """The storage-backed cache `args` ask for over `runner`'s KV buffers, or None."""
    config = HiCacheConfig.from_args(args)
    if config is None:
        if args.enable_hierarchical_cache:
            logger.warning("hierarchical cache without --hicache-storage-backend: the device pool is the only tier")
        return None
    io = KVPageIO(runner, runner.attn_backend, runner.platform.runtime)
    dtype = runner.kv_buffers[0].dtype
    identity = model_identity(runner.model, runner.model.config.raw, io.layout, dtype)
    store = FilePageStore(config.storage_dir, identity)
    logger.info(
        "hierarchical cache: device pool -> file storage at %s (%d-token blocks, %s, %.1f KiB a block)",
        store.root,
        config.block_tokens,
        config.write_policy,
        torch.Size(io.block_shape(config.block_tokens)).numel() * dtype.itemsize / 1024,
    )
    return HierarchicalCache(config, cache, allocator, io, store, free_fn)
