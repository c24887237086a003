"""The scheduler's LoRA manager: adapters loaded on the host, and the device slots they run from.

- Loaded adapters (`--max-loaded-loras` at most) live on the host; each load gets a fresh `uid`
  that keys its requests' prefixes in the radix cache, so KV is never shared across adapters nor
  across two loads under one name.
- Device slots: `--max-loras-per-batch` of them, plus slot 0, the base model's (all zeros). A
  running request holds its adapter's slot (`acquire`/`release` count holders); a slot with no
  holder may be given to another adapter, chosen by `--lora-eviction-policy` (`lru`: the one
  least recently acquired, `fifo`: the one placed first); a pinned adapter keeps its slot.
- A request whose adapter has no slot free waits (acquire returns None); it never fails for it.
- Unloading an adapter that requests use is refused with the reason; nothing else changes.
- Every change to the model's slots is a `LoraCommand` applied to this rank's replica and handed
  to `mirror` (under tensor parallelism: broadcast to the other ranks, which apply it too).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
from dataclasses import dataclass

import torch
from torch import nn

from sglang.ops.lora import BASE_SLOT
from sglang.runtime.lora.adapter import LoraAdapter, LoraError, read_adapter
from sglang.runtime.lora.layers import LoraState, missing_modules
from sglang.runtime.lora.paths import LoraRef
from sglang.runtime.lora.replica import (
    AttachLora,
    LoadLora,
    LoraCommand,
    LoraMirror,
    LoraReplica,
    UnloadLora,
    WriteLoraSlot,
)

logger = logging.getLogger(__name__)


@dataclass
class Loaded:
    adapter: LoraAdapter
    uid: int
    pinned: bool
    users: int = 0
    """Requests (waiting or running) that named this adapter and have not finished."""
    identity: str = ""
    """A digest of the adapter's weights and settings, once asked for (`identity`)."""


@dataclass
class Slot:
    name: str | None = None
    holders: int = 0
    placed: int = 0
    used: int = 0


class LoraManager:
    def __init__(
        self,
        model: nn.Module,
        slots: int,
        max_rank: int,
        targets: frozenset[str],
        max_loaded: int | None,
        eviction_policy: str,
        renames: dict[str, str] | None = None,
        mirror: LoraMirror | None = None,
    ) -> None:
        self.max_rank = max_rank
        self.targets = targets
        self.max_loaded = max_loaded
        self.eviction_policy = eviction_policy
        self.renames = renames or {}
        self.mirror = mirror
        self.replica = LoraReplica(model)
        self._run(AttachLora(slots + 1, max_rank, targets))
        self.state: LoraState = self.replica.attached()
        self.slots = [Slot() for _ in range(slots + 1)]
        self.adapters: dict[str, Loaded] = {}
        self._uids = itertools.count(1)
        self._clock = itertools.count(1)

    # -- loading -------------------------------------------------------------------------------
    def load(self, ref: LoraRef) -> LoraAdapter:
        """Reads and validates the adapter, then registers it (its slot is taken on first use)."""
        if ref.name in self.adapters:
            raise LoraError(f"an adapter named {ref.name!r} is already loaded")
        if self.max_loaded is not None and len(self.adapters) >= self.max_loaded:
            raise LoraError(f"{len(self.adapters)} adapters are loaded, the most --max-loaded-loras allows")
        if ref.pinned and sum(a.pinned for a in self.adapters.values()) + 1 > len(self.slots) - 2:
            raise LoraError("pinning it would leave no device slot for unpinned adapters (--max-loras-per-batch)")
        adapter = read_adapter(ref.name, ref.path, self.max_rank, self.targets)
        adapter = self._renamed(adapter)
        missing = missing_modules(self.state, adapter)
        if missing:
            raise LoraError(f"adapter {ref.name!r} targets modules the model lacks: {', '.join(missing[:4])}")
        uid = next(self._uids)
        self._run(LoadLora(uid, adapter))
        self.adapters[ref.name] = Loaded(adapter, uid, ref.pinned)
        if ref.pinned and (slot := self.acquire(ref.name)) is not None:
            self.release(slot)  # placed now; being pinned, it is never evicted
        logger.info("LoRA adapter %r loaded (rank %d) from %s", ref.name, adapter.rank, ref.path)
        return adapter

    def _renamed(self, adapter: LoraAdapter) -> LoraAdapter:
        if not self.renames:
            return adapter
        weights = {}
        for name, pair in adapter.weights.items():
            for old, new in self.renames.items():
                name = name.replace(old, new)
            weights[name] = pair
        return LoraAdapter(adapter.name, adapter.path, adapter.rank, adapter.scaling, adapter.target_modules, weights)

    def unload(self, name: str) -> None:
        loaded = self.lookup(name)
        if loaded.users:
            raise LoraError(
                f"adapter {name!r} is used by {loaded.users} unfinished request(s); unload it once they end"
            )
        del self.adapters[name]
        for index, slot in enumerate(self.slots):
            if slot.name == name:
                self._run(WriteLoraSlot(index, None))
                self.slots[index] = Slot()
        self._run(UnloadLora(loaded.uid))
        logger.info("LoRA adapter %r unloaded", name)

    def _run(self, command: LoraCommand) -> None:
        if self.mirror is not None:
            self.mirror(command)
        self.replica.apply(command)

    def lookup(self, name: str) -> Loaded:
        loaded = self.adapters.get(name)
        if loaded is None:
            known = ", ".join(sorted(self.adapters)) or "none"
            raise LoraError(f"LoRA adapter {name!r} is not loaded (loaded: {known})")
        return loaded

    def identity(self, name: str) -> str:
        """What the adapter computes, as a name stable across loads and restarts: a digest of
        its rank, scaling and every weight's bytes (the hierarchical cache keys stored KV by it;
        the load's `uid` is neither stable nor about the weights)."""
        loaded = self.lookup(name)
        if not loaded.identity:
            adapter = loaded.adapter
            digest = hashlib.blake2b(f"{adapter.rank}|{adapter.scaling}|".encode(), digest_size=16)
            for path, pair in sorted(adapter.weights.items()):
                digest.update(path.encode())
                for weight in pair:
                    digest.update(f"|{tuple(weight.shape)}|{weight.dtype}|".encode())
                    digest.update(weight.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
            loaded.identity = digest.hexdigest()
        return loaded.identity

    def names(self) -> list[dict[str, object]]:
        return [{"lora_name": n, "lora_path": a.adapter.path, "pinned": a.pinned} for n, a in self.adapters.items()]

    # -- slots ---------------------------------------------------------------------------------
    def acquire(self, name: str | None) -> int | None:
        """The slot `name`'s rows use, now held by one more request; None when every slot is held."""
        if name is None:
            return BASE_SLOT
        loaded = self.lookup(name)
        index = next((i for i, s in enumerate(self.slots) if i and s.name == name), None)
        if index is None:
            index = self._victim()
            if index is None:
                return None
            self._run(WriteLoraSlot(index, loaded.uid))
            self.slots[index] = Slot(name=name, placed=next(self._clock))
        slot = self.slots[index]
        slot.holders += 1
        slot.used = next(self._clock)
        return index

    def use(self, name: str) -> int:
        """Counts one more unfinished request of adapter `name`; returns its uid (its KV namespace)."""
        loaded = self.lookup(name)
        loaded.users += 1
        return loaded.uid

    def unuse(self, name: str) -> None:
        if name in self.adapters:
            self.adapters[name].users -= 1

    def release(self, slot: int) -> None:
        if slot != BASE_SLOT:
            self.slots[slot].holders -= 1

    def _victim(self) -> int | None:
        free = [i for i, s in enumerate(self.slots) if i and s.name is None]
        if free:
            return free[0]
        idle = [
            i
            for i, s in enumerate(self.slots)
            if i and not s.holders and not (s.name in self.adapters and self.adapters[s.name].pinned)
        ]
        if not idle:
            return None
        key = (lambda i: self.slots[i].used) if self.eviction_policy == "lru" else (lambda i: self.slots[i].placed)
        return min(idle, key=key)
