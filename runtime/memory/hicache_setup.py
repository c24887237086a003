"""Building the hierarchical cache from the server arguments: its settings, the model's identity
(part of every block key) and the tiers below the device pool.

Tiers: the device pool, the host tier (`--hicache-ratio` times the pool, or `--hicache-size` GB;
a ratio of 0 builds none) and the storage tier (`--hicache-storage-backend file`). On cpu the
pool is host memory already, so the host tier is a second copy there: worth it only for keeping
more prefixes than the pool, which a larger pool does as well.

Under `--tp-size > 1` rank 0 builds the cache (its tree decides everything) and tells the other
ranks to build their own host pool and storage tier of the same sizes (`BuildTiers`); every rank
stores its shard of the KV under its own identity (`rank_identity`), so a folder written at one
tp size is never read at another, and one rank never reads another's shard.
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

from sglang.platforms.device_runtime import DeviceRuntime
from sglang.runtime.distributed.group import tp_group
from sglang.runtime.memory.hierarchical_cache import HierarchicalCache
from sglang.runtime.memory.host_pool import HostKVPool
from sglang.runtime.memory.host_tier import HostTier
from sglang.runtime.memory.kv_pages import KVPageIO
from sglang.runtime.memory.page_store import FilePageStore
from sglang.runtime.memory.radix_cache import FreeFn, RadixCache
from sglang.runtime.memory.storage_io import StorageIO
from sglang.runtime.memory.storage_tier import StorageTier
from sglang.runtime.memory.tier_commands import BuildTiers, TierMirror
from sglang.runtime.memory.token_allocator import PagedTokenAllocator

if TYPE_CHECKING:
    from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

STORAGE_DIR_ENV = "SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR"
DEFAULT_STORAGE_DIR = "/tmp/hicache"
DEFAULT_BLOCK_TOKENS = 64
"""Tokens per block unless the extra config's `block_tokens` says otherwise (rounded up to whole
pages): one file per stored block, so small blocks mean many small files."""
HOST_MEMORY_SHARE = 0.5
"""At most this share of the host's available memory goes to the host tier (upstream refuses to
start instead; a smaller host tier only keeps fewer prefixes)."""


@dataclass(frozen=True)
class HiCacheConfig:
    storage_dir: Path | None
    """None: no storage tier."""
    block_tokens: int
    write_policy: str
    prefetch_policy: str
    prefetch_timeout_base: float
    prefetch_timeout_per_ki_token: float

    @classmethod
    def from_args(cls, args: ServerArgs) -> HiCacheConfig | None:
        """The lower tiers' settings, or None without `--enable-hierarchical-cache`. The storage
        folder: the extra config's `storage_dir`, else `$SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR`,
        else /tmp/hicache (upstream's file backend's order)."""
        if not args.enable_hierarchical_cache:
            return None
        extra = args.hicache_extra_config()
        folder = None
        if args.hicache_storage_backend is not None:
            folder = Path(extra.get("storage_dir") or os.environ.get(STORAGE_DIR_ENV) or DEFAULT_STORAGE_DIR)
        block = int(extra.get("block_tokens", DEFAULT_BLOCK_TOKENS))
        return cls(
            folder,
            -(-block // args.page_size) * args.page_size,
            args.hicache_write_policy,
            args.hicache_storage_prefetch_policy,
            float(extra.get("prefetch_timeout_base", 1.0)),
            float(extra.get("prefetch_timeout_per_ki_token", 0.25)),
        )


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


def host_tier_tokens(args: ServerArgs, pool_tokens: int, token_bytes: int) -> int:
    """Tokens of the host tier: `--hicache-size` GB, else `--hicache-ratio` times the pool, at most
    `HOST_MEMORY_SHARE` of the available host memory."""
    by_size = args.hicache_size * 10**9 // token_bytes
    wanted = by_size if args.hicache_size > 0 else int(args.hicache_ratio * pool_tokens)
    room = int(DeviceRuntime().memory_info().free_bytes * HOST_MEMORY_SHARE) // token_bytes
    if wanted > room:
        logger.warning("host tier: %d tokens asked for, room for %d; using %d", wanted, room, room)
    return max(min(wanted, room), 0)


def rank_identity(model_id: str, rank: int, size: int) -> str:
    """The identity a tensor-parallel rank stores its KV shard under: the model's at tp=1 (what a
    single-rank server has always stored), else one per (model, tp size, rank)."""
    if size == 1:
        return model_id
    return hashlib.sha256(f"{model_id}|tp{rank}/{size}".encode()).hexdigest()[:32]


@dataclass(frozen=True)
class LowerTiers:
    """One rank's tiers below its KV pool, with what moves KV in and out of that pool."""

    kv: KVPageIO
    host: HostKVPool | None
    storage: StorageTier | None


def build_lower_tiers(
    config: HiCacheConfig, runner: object, host_tokens: int, max_blocks: int, mirror: TierMirror | None = None
) -> LowerTiers:
    """This rank's host pool of `host_tokens` (none at 0) and storage tier (where `config` has a
    folder, keyed by this rank's identity), over `runner`'s KV buffers."""
    kv = KVPageIO(runner, runner.attn_backend, runner.platform.runtime)
    dtype = runner.kv_buffers[0].dtype
    host = None
    if host_tokens:
        host = HostKVPool(
            host_tokens, kv.block_shape(host_tokens), kv.axis + 1, dtype, runner.platform.runtime.host_buffer
        )
    storage = None
    if config.storage_dir is not None:
        group = tp_group()
        identity = rank_identity(
            model_identity(runner.model, runner.model.config.raw, kv.layout, dtype), group.rank, group.size
        )
        io = StorageIO(
            FilePageStore(config.storage_dir, identity), dtype, kv.block_shape(config.block_tokens), max_blocks
        )
        storage = StorageTier(config, io, kv, identity, mirror)
    return LowerTiers(kv, host, storage)


def build_hierarchical_cache(
    args: ServerArgs,
    cache: RadixCache,
    allocator: PagedTokenAllocator,
    runner: object,
    free_fn: FreeFn,
    mirror: TierMirror | None = None,
) -> HierarchicalCache | None:
    """The tiers `args` ask for below `runner`'s KV pool, or None. With `mirror` (rank 0 under
    tensor parallelism), the other ranks build theirs alike and follow every KV move."""
    config = HiCacheConfig.from_args(args)
    if config is None:
        return None
    kv = KVPageIO(runner, runner.attn_backend, runner.platform.runtime)
    token_bytes = torch.Size(kv.block_shape(1)).numel() * runner.kv_buffers[0].dtype.itemsize
    tokens = host_tier_tokens(args, allocator.num_slots, token_bytes)
    max_blocks = max(allocator.num_slots // config.block_tokens, 1)
    if tokens == 0 and config.storage_dir is None:
        logger.warning("hierarchical cache with no host tier and no storage tier: the device pool is the only tier")
        return None
    if mirror is not None:
        mirror(BuildTiers(config, tokens, max_blocks))
    tiers = build_lower_tiers(config, runner, tokens, max_blocks, mirror)
    host = HostTier(tiers.host, cache, tiers.kv, mirror) if tiers.host is not None else None
    storage = tiers.storage
    logger.info(
        "hierarchical cache: device pool -> host tier of %s -> %s (%d-token blocks, %s, prefetch %s)",
        f"{tokens} tokens ({tokens * token_bytes / 2**20:.0f} MiB)" if host else "none",
        f"file storage at {storage.io.store.root}" if storage else "no storage tier",
        config.block_tokens,
        config.write_policy,
        config.prefetch_policy,
    )
    return HierarchicalCache(config, cache, allocator, host, storage, free_fn)
