"""A Ctrl-C while a child starts is acted on once the child has all of its start-up data."""

from __future__ import annotations

import os
import signal
import time

import pytest

from sglang.runtime.processes.launch import _interrupts_deferred


def test_an_interrupt_inside_the_block_arrives_when_it_ends() -> None:
    reached_the_end = False
    with pytest.raises(KeyboardInterrupt), _interrupts_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # an undeferred interrupt would be raised here
        reached_the_end = True
    assert reached_the_end
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())


def test_no_interrupt_leaves_the_handler_as_it_was() -> None:
    with _interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
