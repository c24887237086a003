"""The engine under schedules that share KV, and when its scheduler dies or hangs.

- `n: 8` over a ~420-token prompt on a 2048-token pool (captured decode steps on, the cpu
  default): rows share the prompt's slots, which once overflowed the captured steps' static
  slot table and killed the scheduler. 16 requests sharing a ~1300-token prefix on the same pool
  overflow four pools' worth of slot entries: those steps run eagerly, counted in /metrics.
- The scheduler SIGKILLed, and the scheduler stopped in the middle of a generation (SIGSTOP: no
  thread of it runs, as when native code holds its interpreter lock), give the documented
  behaviour within `--watchdog-timeout`: pending requests answer 503, `/health` answers 503 with
  the cause, and the server exits with status 1 for its supervisor to restart it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable

import httpx
import psutil
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer, wait_until

POOL = "2048"
WATCHDOG_S = 6.0
EXIT_WITHIN_S = WATCHDOG_S + 30.0


def test_n8_over_a_shared_prompt_on_a_small_pool(server_factory: Callable[..., RunningServer]) -> None:
    server = server_factory("--max-total-tokens", POOL)
    prompt = list(range(1000, 1420))
    with server.client() as http:
        body = {"input_ids": prompt, "sampling_params": {"n": 8, "temperature": 0.8, "max_new_tokens": 24}}
        response = http.post("/generate", json=body)
        assert response.status_code == 200, response.text
        outputs = response.json()
        assert len(outputs) == 8 and all(o["meta_info"]["completion_tokens"] >= 1 for o in outputs)
        assert http.get("/health").status_code == 200

        assert server.metric_total("sglang_static_steps_total") > 0, "the n=8 decode steps replayed captured buckets"
        fallbacks_before = server.metric_total("sglang_static_step_fallbacks_total")
        shared = list(range(2000, 3300))

        def ask(i: int, results: list[int]) -> None:
            body = {"input_ids": [*shared, 5000 + i], "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
            results.append(http.post("/generate", json=body).status_code)

        statuses: list[int] = []
        threads = [threading.Thread(target=ask, args=(i, statuses)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(REQUEST_TIMEOUT_S)
        assert statuses == [200] * 16
        assert http.get("/health").status_code == 200
    assert server.metric_total("sglang_static_step_fallbacks_total") > fallbacks_before, (
        "16 rows of ~1300 shared tokens exceed the static slot table: run eagerly, and counted"
    )


def scheduler_process(server: RunningServer) -> psutil.Process:
    """The engine's scheduler: the server's child that loaded the model (the largest one)."""
    children = psutil.Process(server.process.pid).children()
    return max(children, key=lambda p: p.memory_info().rss)


def long_generation(server: RunningServer, outcome: dict[str, object]) -> threading.Thread:
    def run() -> None:
        body = {"text": "Count to a thousand:", "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}
        with httpx.Client(base_url=server.url, timeout=REQUEST_TIMEOUT_S) as client:
            response = client.post("/generate", json=body)
        outcome["status"], outcome["body"] = response.status_code, response.json()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.parametrize("failure", ["killed", "hung"])
def test_scheduler_death_fails_pending_requests_and_exits(
    server_factory: Callable[..., RunningServer], failure: str
) -> None:
    server = server_factory("--max-total-tokens", POOL, "--watchdog-timeout", str(WATCHDOG_S))
    scheduler = scheduler_process(server)
    outcome: dict[str, object] = {}
    pending = long_generation(server, outcome)
    wait_until(lambda: server.server_info()["num_running_requests"] == 1, timeout=60)
    started = time.monotonic()
    if failure == "killed":
        os.kill(scheduler.pid, signal.SIGKILL)
    else:
        os.kill(scheduler.pid, signal.SIGSTOP)
    pending.join(EXIT_WITHIN_S)
    assert not pending.is_alive(), "the pending request was not answered"
    assert outcome["status"] == 503, outcome
    message = outcome["body"]["error"]["message"]
    assert ("watchdog-timeout" in message) if failure == "hung" else ("exit code -9" in message), message
    if failure == "hung":
        assert time.monotonic() - started >= WATCHDOG_S * 0.9, "killed before the timeout"
    health = server.get("/health")
    assert health.status_code == 503 and "exits with status 1" in health.json()["error"]["message"]
    assert server.process.wait(EXIT_WITHIN_S) == 1


def test_ctrl_c_while_loading_ends_every_process(server_factory: Callable[..., RunningServer]) -> None:
    """SIGINT (Ctrl-C) before the server is up: the loading children are killed, nothing is left
    running, and `sglang serve` says so in one line (no traceback), with status 130."""
    server = server_factory("--max-total-tokens", POOL, wait=False)
    children = wait_until(lambda: psutil.Process(server.process.pid).children(), timeout=60, what="a child")
    server.process.send_signal(signal.SIGINT)
    assert server.process.wait(30) == 130, server.log_tail()
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"children left running: {alive}"
    assert "Traceback" not in server.log_tail() and "interrupted" in server.log_tail()
