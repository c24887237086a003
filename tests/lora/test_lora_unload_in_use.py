"""Unloading an adapter that unfinished requests use is refused with the reason, as a 400 in the
API's error shape, while they run or wait; once they end the same unload succeeds.

(Upstream instead unregisters the name at once and holds the unload's reply until the requests
end; here the caller retries, and no request ever loses its adapter mid-generation either way.)
The scheduler and the route are real; only the HTTP server's process is not started: the route's
control call runs the scheduler's own handler in this process."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

import httpx
from fastapi import FastAPI

from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.processes.detokenizer import Detokenizer
from sglang.runtime.scheduler.process import answer, build_scheduler
from sglang.runtime.server.lora_api import router
from sglang.runtime.server_args import ServerArgs
from tests.runtime.runtime_harness import make_request, model_threads, run_requests


class SchedulerControl:
    """The tokenizer manager's `control`, answered by an in-process scheduler, and the adapter
    table of its admission (which the LoRA routes update)."""

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.admission = SimpleNamespace(lora_adapters={})

    async def control(self, message, timeout: float = 30.0):
        return answer(message, self.scheduler)


def unload_over_http(app: FastAPI, name: str) -> httpx.Response:
    async def post() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.post("/unload_lora_adapter", json={"lora_name": name})

    return asyncio.run(post())


def test_unload_of_an_adapter_in_use_is_a_400_until_its_requests_end(lora_models) -> None:
    model = lora_models("llama")
    args = ServerArgs(
        model_path=str(model.path),
        device="cpu",
        max_total_tokens=1024,
        cpu_threads=1,
        lora_paths=(f"a={model.adapters['a']}", f"b={model.adapters['b']}"),
        max_loras_per_batch=1,
        disable_cuda_graph=True,
    )
    with model_threads():
        scheduler, info = build_scheduler(args)
        app = FastAPI()
        app.include_router(router)
        app.state.server = SimpleNamespace(manager=SchedulerControl(scheduler))
        # One slot: the second request of "a" runs, "b"'s waits for the slot; both count as users.
        requests = [
            dataclasses.replace(make_request([1500 + i, 1501, 1502], max_new_tokens=3), lora_path=name)
            for i, name in enumerate(("a", "b"))
        ]
        replies: list[httpx.Response] = []

        def unload_mid_run(step: int, _) -> None:
            if step == 1:
                replies.extend(unload_over_http(app, name) for name in ("a", "b"))

        outcomes = run_requests(
            scheduler, Detokenizer(load_tokenizer(Path(info.tokenizer_path))), requests, unload_mid_run
        )
        assert all(len(outcomes[r.rid].output_ids) == 3 for r in requests)  # neither lost its adapter
        for reply, name in zip(replies, ("a", "b")):
            assert reply.status_code == 400
            body = reply.json()
            assert body["error"]["code"] == 400 and body["error"]["type"] == "invalid_request_error"
            assert f"adapter {name!r} is used by 1 unfinished request" in body["error"]["message"]
            assert body["success"] is False and set(body["loaded_adapters"]) == {"a", "b"}
        done = unload_over_http(app, "b")
        assert done.status_code == 200 and set(done.json()["loaded_adapters"]) == {"a"}
