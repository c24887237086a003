"""What every tensor-parallel rank does to its own lower tiers, as commands rank 0 broadcasts.

Under `--tp-size > 1` each rank holds its shard of every token's KV (its share of the KV heads),
so each rank keeps its own host rows and its own storage folder (keyed by model, tp size and
rank: runtime/memory/hicache_setup.py `rank_identity`). Only rank 0 has the radix tree and the
scheduler, so only rank 0 decides: which nodes go to which host rows, which prefixes are backed
up, which waiting requests prefetch, which stored blocks are loaded into which pool slots. Each
decision that moves KV is one of these commands, which rank 0's tiers hand to their mirror (the
leader runner, which broadcasts it before rank 0 does the same on its own shard); a follower
applies them in the same order to its own tiers (runtime/memory/tier_replica.py).

Invariants: nothing about the tree, the pool's slots or the host rows is decided on a follower;
every command carries the slots and rows rank 0 chose. The one thing a rank may see differently
is its own disk (a block missing, corrupt or not yet read on one rank): `LoadBlocks` therefore
agrees, across ranks, on how many leading blocks every rank has before any rank uses one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from sglang.runtime.memory.hicache_setup import HiCacheConfig


@dataclass(frozen=True)
class BuildTiers:
    """Build this rank's lower tiers: a host pool of `host_tokens` (0: none) and, where `config`
    has a storage folder, a storage tier whose prefetches hold at most `max_blocks` blocks."""

    config: HiCacheConfig
    host_tokens: int
    max_blocks: int


@dataclass(frozen=True)
class HostBackUp:
    """Copy the KV at pool `slots` into host `rows`."""

    slots: torch.Tensor
    rows: torch.Tensor


@dataclass(frozen=True)
class HostLoad:
    """Copy the KV at host `rows` into pool `slots`."""

    rows: torch.Tensor
    slots: torch.Tensor


@dataclass(frozen=True)
class StoreBlocks:
    """Store the whole blocks of `token_ids` (KV at pool `slots`) that this rank's storage lacks."""

    token_ids: tuple[int, ...]
    slots: torch.Tensor


@dataclass(frozen=True)
class StartPrefetch:
    """Start prefetch `job` of the stored blocks of `token_ids` after its first `cached` tokens."""

    job: int
    token_ids: tuple[int, ...]
    cached: int


@dataclass(frozen=True)
class LoadBlocks:
    """End prefetch `job`. With `slots`: agree with every rank on how many of the first `blocks`
    blocks after `cached` tokens all ranks hold, and write that many (from token `cached` on) at
    the first `slots`. Without: nothing is loaded."""

    job: int
    token_ids: tuple[int, ...]
    cached: int
    blocks: int
    slots: torch.Tensor | None


@dataclass(frozen=True)
class AddScope:
    """Key the stored blocks of radix namespace `namespace` by adapter `adapter_identity`."""

    namespace: int
    adapter_identity: str


TierCommand = BuildTiers | HostBackUp | HostLoad | StoreBlocks | StartPrefetch | LoadBlocks | AddScope
TierMirror = Callable[[TierCommand], None]
"""Where rank 0's tier commands go besides its own tiers (the other ranks); None at tp=1."""
