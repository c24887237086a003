"""Control messages are dispatched on their type: an unknown type is an error reply, which the
tokenizer manager raises, and never another message's answer (such as the scheduler's status);
a handler that raises is an error reply too, and the scheduler goes on."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from sglang.runtime.processes import ipc
from sglang.runtime.processes.control import (
    ControlError,
    ControlMessage,
    ControlReply,
    ControlRequest,
    FlushCache,
    FlushResult,
    GetSchedulerStatus,
    SchedulerStatus,
)
from sglang.runtime.processes.messages import ReadyInfo
from sglang.runtime.processes.tokenizer_manager import ControlFailedError, TokenizerManager
from sglang.runtime.scheduler import process

from .runtime_harness import Runtime


@dataclass(frozen=True)
class Unknown(ControlMessage[FlushResult]):
    """A message no handler is registered for (a sender newer than the scheduler)."""


def _answers(rt: Runtime, monkeypatch: pytest.MonkeyPatch, *messages: ControlMessage) -> list[ControlReply]:
    scheduler = rt.make_scheduler(max_total_tokens=64)
    sent: list[ControlReply] = []
    monkeypatch.setattr(process.ipc, "send", lambda _socket, message: sent.append(message))
    for i, message in enumerate(messages):
        process._handle(scheduler, ControlRequest(str(i), message), None)
    return sent


def test_an_unknown_control_message_gets_an_error_reply(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    (reply,) = _answers(rt, monkeypatch, Unknown())
    assert reply == ControlReply("0", ControlError("unknown control message type Unknown"))


@dataclass(frozen=True)
class Failing(ControlMessage[FlushResult]):
    """A message whose handler raises (a bug in it, or a device call that failed)."""


@process.answer.register
def _(message: Failing, scheduler: object) -> FlushResult:
    raise RuntimeError("the device said no")


def test_a_handler_that_raises_gets_an_error_reply(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    failed, status = _answers(rt, monkeypatch, Failing(), GetSchedulerStatus())
    assert failed == ControlReply("0", ControlError("Failing failed: RuntimeError: the device said no"))
    assert isinstance(status.result, SchedulerStatus)  # the next message is answered as usual


def test_known_messages_get_their_own_reply_type(rt: Runtime, monkeypatch: pytest.MonkeyPatch) -> None:
    status, flushed = _answers(rt, monkeypatch, GetSchedulerStatus(), FlushCache())
    assert isinstance(status.result, SchedulerStatus) and status.result.kv_tokens_total >= 64
    assert flushed.result == FlushResult(True)


class _Vocabulary:
    def get_vocab(self) -> dict[str, int]:
        return {"a": 0}


def test_the_tokenizer_manager_raises_an_error_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    info = ReadyInfo(**{name: None for name in ReadyInfo.__dataclass_fields__})
    sent: list[ControlRequest] = []

    async def scenario() -> None:
        manager = TokenizerManager(ipc.Endpoints.fresh(), info, _Vocabulary(), max_queued=4)
        monkeypatch.setattr(ipc, "send", lambda _socket, message: sent.append(message))
        call = asyncio.ensure_future(manager.control(Unknown(), timeout=5))
        await asyncio.sleep(0)
        (request,) = sent
        assert request.message == Unknown()
        manager.control_waiters[request.request_id].set_result(
            ControlReply(request.request_id, ControlError("unknown control message type Unknown"))
        )
        with pytest.raises(ControlFailedError, match="Unknown: unknown control message type"):
            await call
        manager.ctx.destroy(linger=0)

    asyncio.run(scenario())
