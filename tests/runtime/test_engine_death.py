"""When the engine dies, every waiter learns the first reason: the process that failed, not one
that exited after it (the scheduler's death makes the detokenizer's pipe close too)."""

from __future__ import annotations

import asyncio

import pytest

from sglang.runtime.processes import ipc
from sglang.runtime.processes.tokenizer_manager import EngineDeadError, TokenizerManager

from .runtime_harness import INFO


class _Vocabulary:
    """The manager reads only the vocabulary's longest token from its tokenizer at construction."""

    def get_vocab(self) -> dict[str, int]:
        return {"a": 0}


def test_first_failure_reason_wins() -> None:
    async def scenario() -> None:
        manager = TokenizerManager(ipc.Endpoints.fresh(), INFO, _Vocabulary(), max_queued=4)
        waiter = manager.control_waiters["flush"] = asyncio.get_running_loop().create_future()
        manager.fail_all("the sglang-scheduler process exited unexpectedly (exit code 1)")
        manager.fail_all("the sglang-detokenizer process exited unexpectedly (exit code 0)")
        assert manager.dead_reason is not None and "scheduler" in manager.dead_reason
        with pytest.raises(EngineDeadError, match="scheduler"):
            await waiter
        manager.ctx.destroy(linger=0)

    asyncio.run(scenario())
