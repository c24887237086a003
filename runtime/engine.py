"""`sglang.Engine`: the runtime in-process, without HTTP.

The engine owns its child processes and runs its tokenizer manager on a private event loop in
a background thread, so both plain and async callers can use it:

    with sglang.Engine() as engine:                     # the embedded default model
        out = engine.generate("The capital of France is", {"max_new_tokens": 8})
        for chunk in engine.generate("Count:", {"max_new_tokens": 8}, stream=True): ...
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import Any, TypeVar

from sglang.runtime.loader.tokenizer import load_tokenizer
from sglang.runtime.observability.step_profiler import ProfileSettings
from sglang.runtime.observability.tracing import StageTracer
from sglang.runtime.processes.control import (
    ContinueGeneration,
    FlushCache,
    GetSchedulerStatus,
    GetWeightsByName,
    LoadLoraAdapter,
    PauseGeneration,
    PauseMode,
    StartProfile,
    StopProfile,
    UnloadLoraAdapter,
    UpdateWeightsFromDisk,
    UpdateWeightsFromTensor,
    WeightsUpdated,
)
from sglang.runtime.processes.launch import Children, launch_children
from sglang.runtime.processes.preload import TOKENIZER_CODE, preload
from sglang.runtime.processes.tokenizer_manager import TokenizerManager, last_item
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError
from sglang.runtime.server_args import ServerArgs

logger = logging.getLogger(__name__)

_SENTINEL = object()


R = TypeVar("R")


async def _run_on_loop(fn: Callable[..., R], *args: Any) -> R:
    """`fn(*args)` run on the engine's loop (the tokenizer manager's state is that loop's alone)."""
    return fn(*args)


class Engine:
    def __init__(self, model_path: str | None = None, device: str = "auto", **server_args: Any) -> None:
        from pathlib import Path

        self.server_args = ServerArgs(model_path=model_path, device=device, **server_args)
        preloading = preload(*TOKENIZER_CODE)
        self.children: Children = launch_children(self.server_args)
        preloading.join()
        self.info = self.children.info
        self.tokenizer = load_tokenizer(Path(self.info.tokenizer_path))
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sglang-engine-loop", daemon=True)
        self._thread.start()
        self.manager: TokenizerManager = self._call(self._start_manager())
        self._closed = False

    async def _start_manager(self) -> TokenizerManager:
        args = self.server_args
        tracer = StageTracer.start(args.trace_config("tokenizer_manager"))
        manager = TokenizerManager(
            self.children.endpoints,
            self.info,
            self.tokenizer,
            args.max_queued_requests,
            tracer,
            args.allow_auto_truncate,
            args.weight_version,
        )
        manager.start()
        loop = asyncio.get_running_loop()
        self._stop_supervising = self.children.supervise(loop, manager.fail_all, self.server_args.watchdog_timeout)
        return manager

    async def _stop_watching(self) -> None:
        self._stop_supervising()
        self.manager.close()

    def _call(self, coro) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    # -- generation ------------------------------------------------------------------------
    @staticmethod
    def _input(prompt, sampling_params, input_ids, stream, **kwargs) -> GenerateInput:
        fields = {k: v for k, v in kwargs.items() if v is not None}
        return GenerateInput(text=prompt, input_ids=input_ids, sampling_params=sampling_params, stream=stream, **fields)

    def generate(
        self,
        prompt: str | list[str] | None = None,
        sampling_params: dict[str, Any] | list[dict[str, Any]] | None = None,
        input_ids: list[int] | list[list[int]] | None = None,
        return_logprob: bool | list[bool] | None = None,
        logprob_start_len: int | list[int] | None = None,
        top_logprobs_num: int | list[int] | None = None,
        token_ids_logprob: list[int] | None = None,
        return_text_in_logprobs: bool | None = None,
        stream: bool = False,
        rid: str | list[str] | None = None,
        priority: int | None = None,
        lora_path: str | list[str | None] | None = None,
        session_params: dict[str, Any] | list[dict[str, Any]] | None = None,
    ) -> dict[str, Any] | list[dict[str, Any]] | Iterator[dict[str, Any]]:
        """One output dict (`text`, `output_ids`, `meta_info`), a list for a batch or n > 1,
        or, with `stream=True`, an iterator of cumulative outputs."""
        obj = self._input(
            prompt,
            sampling_params,
            input_ids,
            stream,
            return_logprob=return_logprob,
            logprob_start_len=logprob_start_len,
            top_logprobs_num=top_logprobs_num,
            token_ids_logprob=token_ids_logprob,
            return_text_in_logprobs=return_text_in_logprobs,
            rid=rid,
            priority=priority,
            lora_path=lora_path,
            session_params=session_params,
        )
        if stream:
            return self._stream(obj)
        return self._call(self._collect(obj))

    async def async_generate(self, prompt=None, sampling_params=None, input_ids=None, stream=False, **kwargs):
        """The same as `generate`, awaitable from any event loop; with `stream=True` it returns
        an async iterator."""
        obj = self._input(prompt, sampling_params, input_ids, stream, **kwargs)
        if stream:
            return self._async_stream(obj)
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._collect(obj), self._loop))

    async def _collect(self, obj: GenerateInput) -> Any:
        return await last_item(self.manager.generate(obj))

    def _stream(self, obj: GenerateInput) -> Iterator[dict[str, Any]]:
        queue: asyncio.Queue = asyncio.Queue()
        future = self._pump(obj, lambda item: self._loop.call_soon_threadsafe(queue.put_nowait, item))
        try:
            while True:
                item = asyncio.run_coroutine_threadsafe(queue.get(), self._loop).result()
                if item is _SENTINEL:
                    future.result()  # re-raises the producer's error, if any
                    return
                yield item
        finally:
            future.cancel()

    async def _async_stream(self, obj: GenerateInput) -> AsyncIterator[dict[str, Any]]:
        queue: asyncio.Queue = asyncio.Queue()
        caller = asyncio.get_running_loop()
        future = self._pump(obj, lambda item: caller.call_soon_threadsafe(queue.put_nowait, item))
        try:
            while (item := await queue.get()) is not _SENTINEL:
                yield item
            await asyncio.wrap_future(future)
        finally:
            future.cancel()

    def _pump(self, obj: GenerateInput, put) -> Future:
        async def produce() -> None:
            try:
                async for out in self.manager.generate(obj):
                    put(out)
            finally:
                put(_SENTINEL)

        return asyncio.run_coroutine_threadsafe(produce(), self._loop)

    # -- control ---------------------------------------------------------------------------
    def flush_cache(self) -> bool:
        return self._call(self.manager.control(FlushCache())).ok

    def load_lora_adapter(self, lora_name: str, lora_path: str, pinned: bool = False) -> dict[str, Any]:
        """Upstream's `Engine.load_lora_adapter`: `{"success", "error_message", "loaded_adapters"}`."""
        return self._lora_reply(LoadLoraAdapter(lora_name, lora_path, pinned))

    def unload_lora_adapter(self, lora_name: str) -> dict[str, Any]:
        return self._lora_reply(UnloadLoraAdapter(lora_name))

    def _lora_reply(self, message: LoadLoraAdapter | UnloadLoraAdapter) -> dict[str, Any]:
        return self._call(self.manager.control(message, timeout=300.0)).to_json()

    def open_session(
        self,
        capacity_of_str_len: int,
        session_id: str | None = None,
        streaming: bool = False,
        timeout: float | None = None,
    ) -> str:
        """Upstream's: a session for multi-turn requests (`session_params`); its id. Raises
        InvalidRequestError for an id already open, or streaming without `enable_streaming_session`."""
        if streaming and not self.server_args.enable_streaming_session:
            raise InvalidRequestError("streaming sessions need enable_streaming_session", "streaming")
        return self._call(_run_on_loop(self.manager.sessions.open, session_id, streaming, timeout))

    def close_session(self, session_id: str) -> None:
        self._call(_run_on_loop(self.manager.sessions.close, session_id))

    def update_weights_from_disk(self, model_path: str, load_format: str | None = None) -> tuple[bool, str, int]:
        """Upstream's: the weights replaced in place by another checkpoint of the same model, after
        the requests in flight finish; `(success, message, num_paused_requests)`."""
        result = self._update_weights(lambda: UpdateWeightsFromDisk(model_path, load_format=load_format))
        return result.success, result.message, 0

    def update_weights_from_tensor(
        self, named_tensors: list[tuple[str, Any]], load_format: str | None = None, flush_cache: bool = True
    ) -> tuple[bool, str]:
        """Upstream's: `(checkpoint name, tensor)` pairs (whole tensors; each rank keeps its slice)
        copied into the served dense weights in place, after the requests in flight finish;
        `(success, message)`. Weights served quantized are refused: update them from disk."""
        result = self._update_weights(lambda: UpdateWeightsFromTensor(list(named_tensors), flush_cache, load_format))
        return result.success, result.message

    def _update_weights(self, message: Callable[[], UpdateWeightsFromDisk | UpdateWeightsFromTensor]) -> WeightsUpdated:
        """The scheduler's answer to the update `message()` builds, or the refusal of its fields."""
        try:
            built = message()
        except ValueError as e:
            return WeightsUpdated(False, str(e))
        return self._call(self.manager.update_weights(built))

    def get_weights_by_name(self, name: str, truncate_size: int = 100) -> list[Any] | None:
        """Upstream's: checkpoint tensor `name` as float lists (its first `truncate_size` rows), or None."""
        return self._call(self.manager.control(GetWeightsByName(name, truncate_size))).parameter

    def pause_generation(self, mode: PauseMode = "abort") -> None:
        """Upstream's: no model step runs until `continue_generation` (modes: `Scheduler.pause`)."""
        self._call(self.manager.control(PauseGeneration(mode)))

    def continue_generation(self, torch_empty_cache: bool = True) -> None:
        self._call(self.manager.control(ContinueGeneration(torch_empty_cache)))

    def start_profile(self, **settings: Any) -> None:
        """Upstream's `Engine.start_profile`: a torch profiler trace of the scheduler's steps
        (keywords: upstream's `ProfileReq` fields; see `runtime/observability/step_profiler.py`).
        Raises RuntimeError with the reason when refused, as upstream does."""
        self._profile_reply(StartProfile(ProfileSettings.from_json(settings)))

    def stop_profile(self) -> None:
        """Ends the profile and writes its trace."""
        self._profile_reply(StopProfile())

    def _profile_reply(self, message: StartProfile | StopProfile) -> None:
        result = self._call(self.manager.control(message, timeout=300.0))
        if not result.success:
            raise RuntimeError(result.message)

    def get_model_info(self) -> dict[str, Any]:
        return self.info.model_info()

    def get_server_info(self) -> dict[str, Any]:
        return self._call(self.manager.control(GetSchedulerStatus())).to_json()

    def concat_and_append(
        self, prefix: str | list[int], branches: list[str] | list[list[int]], prefill_missing: bool = True
    ) -> dict[str, Any]:
        """Caches the KV of `prefix` followed by every branch, reusing the KV each branch computed
        after `prefix` (parallel encoding; `join("concate_and_append")` of the frontend). Answers
        `{"ok", "input_ids", "cached_tokens", "reason", ...}`; see runtime/processes/kv_concat_request.py."""
        from sglang.runtime.processes.kv_concat_request import ConcatInput, run_concat

        body = {"prefix": prefix, "branches": branches, "prefill_missing": prefill_missing}
        return self._call(run_concat(self.manager, ConcatInput.from_dict(body)))

    @property
    def healthy(self) -> bool:
        return self.manager.dead_reason is None

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._call(self._stop_watching())
        self.children.terminate()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.shutdown()
