"""The storage tier's disk traffic, off the scheduler's step: a writer thread and a reader thread.

Writes: the scheduler hands over each block as a function that gives its host copy (its own
tensor: the device slots and host rows may be reused at once), usually a device read still under
way (runtime/memory/kv_pages.py `read_async`), and goes on; the writer thread waits for each
copy and publishes blocks in order. `flush` waits for every queued write, with a bound, and
shutdown flushes (`close`), so a block handed over is on disk unless the bound ran out, its copy
failed or the disk refused it (counted by the store).

Reads: a request waiting in the queue gets a `Prefetch` of its stored blocks; the reader thread
loads them in prefix order into the job (stopping at the first block storage does not have), and
the scheduler takes what has landed when it admits the request. How long admission waits for a
job is upstream's `--hicache-storage-prefetch-policy`:
- best_effort: never; the request is admitted with the blocks that landed so far;
- wait_complete: until the job has read every block it can;
- timeout: until it completes or `timeout_base + timeout_per_ki_token * tokens / 1024` seconds
  passed (upstream's `prefetch_timeout_base` / `prefetch_timeout_per_ki_token` extra config keys).

Prefetched blocks wait in host memory until their request is admitted; all jobs together hold
at most `max_blocks` of them (the device pool's size in blocks: more could not be loaded at
once anyway). A job the reader stops for that bound is done with what it has. Jobs share what
they hold: requests that arrive together with one stored prefix (a few-shot prompt, a system
prompt) queue jobs for the same keys, and a block another unfinished job holds is handed to the
next one without reading the disk again or taking more room.

Invariants: `stored` holds keys known to be on disk (written, or read intact); a job's `blocks`
only grow, in prefix order, until `finish` takes them, and `done` is set once the reader stops
on it; `_shared` holds each block that unfinished jobs hold, once, with the number of those
jobs; `held_blocks == len(_shared) <= max_blocks`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from sglang.runtime.memory.page_store import FilePageStore

logger = logging.getLogger(__name__)

PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")

BlockCopy = Callable[[], torch.Tensor]
"""Gives one block's host copy (waiting for the device read that makes it, if need be)."""


@dataclass(frozen=True)
class BlockRef:
    """What identifies one stored block: its key, its parent's key and its tokens."""

    key: str
    parent: str
    tokens: Sequence[int]


@dataclass
class Prefetch:
    """One waiting request's read of its stored blocks."""

    refs: list[BlockRef]
    deadline: float
    blocks: dict[str, torch.Tensor] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)
    cancelled: bool = False
    id: int = 0
    """The name the other tensor-parallel ranks know the job by (0 at tp=1)."""


class StorageIO:
    def __init__(self, store: FilePageStore, dtype: torch.dtype, block_shape: Sequence[int], max_blocks: int) -> None:
        if max_blocks < 1:
            raise ValueError(f"prefetches need room for at least one block, got {max_blocks}")
        self.store = store
        self.dtype = dtype
        self.block_shape = tuple(block_shape)
        self.max_blocks = max_blocks
        self._shared: dict[str, tuple[torch.Tensor, int]] = {}  # key -> (block, unfinished jobs holding it)
        self._held_lock = threading.Lock()  # guards _shared and jobs' blocks/cancelled
        self.stored: set[str] = set()
        self._queued: set[str] = set()  # handed to the writer, not written yet
        self._writes: queue.Queue[tuple[BlockRef, BlockCopy] | None] = queue.Queue()
        self._reads: queue.Queue[Prefetch | None] = queue.Queue()
        self._idle = threading.Condition()
        self._threads = [
            threading.Thread(target=self._write_loop, name="hicache-writer", daemon=True),
            threading.Thread(target=self._read_loop, name="hicache-reader", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    @property
    def held_blocks(self) -> int:
        """Distinct blocks the unfinished jobs hold."""
        return len(self._shared)

    # -- writes ------------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        """Stored or on its way (a disk check only for keys never seen: another server's)."""
        if key in self.stored or key in self._queued:
            return True
        if self.store.contains(key):
            self.stored.add(key)
            return True
        return False

    def write(self, ref: BlockRef, block: BlockCopy) -> None:
        """Queues the block `block()` gives (on the writer thread: a host tensor nobody else
        writes) for storage under `ref.key`."""
        with self._idle:
            self._queued.add(ref.key)
        self._writes.put((ref, block))

    def flush(self, timeout: float) -> bool:
        """Waits until every queued write is done; False when `timeout` seconds ran out first."""
        with self._idle:
            return self._idle.wait_for(lambda: not self._queued, timeout)

    def _write_loop(self) -> None:
        while (item := self._writes.get()) is not None:
            ref, block = item
            try:
                if self.store.save(ref.key, ref.parent, ref.tokens, block()):
                    self.stored.add(ref.key)
            except Exception:  # a failed copy must not kill the writer: the block stays unstored
                logger.exception("storage tier: backing up a block failed")
            with self._idle:
                self._queued.discard(ref.key)
                self._idle.notify_all()

    # -- reads -------------------------------------------------------------------------------
    def prefetch(self, refs: list[BlockRef], timeout: float) -> Prefetch:
        job = Prefetch(refs, time.monotonic() + timeout)
        if refs:
            self._reads.put(job)
        else:
            job.done.set()
        return job

    def finish(self, job: Prefetch) -> dict[str, torch.Tensor]:
        """Ends `job` (its reads stop) and hands over the blocks it read, which no longer count
        against `max_blocks`."""
        with self._held_lock:
            job.cancelled = True
            blocks, job.blocks = job.blocks, {}
            for key in blocks:
                self._release(key)
        return blocks

    def _release(self, key: str) -> None:
        """One job fewer holds `key` (under `_held_lock`)."""
        block, holders = self._shared[key]
        if holders > 1:
            self._shared[key] = (block, holders - 1)
        else:
            del self._shared[key]

    def _read_loop(self) -> None:
        while (job := self._reads.get()) is not None:
            try:
                for ref in job.refs:
                    if not self._read_one(job, ref):
                        break
            except Exception:  # a bad read must not kill the reader: the request recomputes
                logger.exception("storage tier: prefetch failed")
            finally:
                job.done.set()

    def _read_one(self, job: Prefetch, ref: BlockRef) -> bool:
        """Puts one block into `job`: the one another unfinished job holds, else read from disk if
        the bound allows; whether the job goes on."""
        with self._held_lock:
            if job.cancelled:
                return False
            if ref.key in self._shared:
                block, holders = self._shared[ref.key]
                self._shared[ref.key] = (block, holders + 1)
                job.blocks[ref.key] = block
                return True
            if len(self._shared) >= self.max_blocks:
                return False
        block = self.store.load(ref.key, ref.parent, ref.tokens, self.dtype, self.block_shape)
        if block is None:
            self.stored.discard(ref.key)
            return False
        self.stored.add(ref.key)
        with self._held_lock:  # only this thread adds to `_shared`, so the bound still holds
            if job.cancelled:
                return False
            self._shared[ref.key] = (block, 1)
            job.blocks[ref.key] = block
        return True

    def close(self, timeout: float) -> bool:
        """Flushes queued writes (bounded by `timeout`) and stops both threads."""
        flushed = self.flush(timeout)
        if not flushed:
            logger.warning("storage tier: %d blocks not written at shutdown (%.0f s bound)", len(self._queued), timeout)
        self._writes.put(None)
        self._reads.put(None)
        return flushed
