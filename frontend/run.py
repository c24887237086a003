"""Running programs: one (`run_program`), many on a thread pool (`run_batch`), and cache warm-up.

Error contract: an exception raised by a program *body* propagates to the caller unchanged (in
`run_batch`, from the first failing program in input order, and the rest is cancelled). An
exception raised while *executing* a stream (a backend call) is stored in that program's state
and raised as `ProgramError` when the caller reads from it; `state.error()` returns it.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import tqdm

from sglang.frontend.backend.base import BaseBackend
from sglang.frontend.config import current_backend, global_config
from sglang.frontend.executor import StreamExecutor
from sglang.frontend.sampling_params import SamplingParams
from sglang.frontend.state import ProgramState
from sglang.frontend.tracer import extract_prefix

if TYPE_CHECKING:
    from sglang.frontend.function import SglFunction

Runner = Callable[[dict[str, Any]], ProgramState]


def run_program(
    program: SglFunction,
    backend: BaseBackend,
    args: tuple,
    kwargs: dict[str, Any],
    default_params: SamplingParams,
    *,
    stream: bool = False,
    sync: bool = False,
) -> ProgramState:
    """Run the body on this thread, the stream on its executor; return at once unless `sync`."""
    kwargs = {**kwargs, **program.bind_arguments}
    exe = StreamExecutor(backend, default_params, stream=stream, num_api_spec_tokens=program.num_api_spec_tokens)
    state = ProgramState(exe)
    token = current_backend.set(backend)
    try:
        program.func(state, *args, **kwargs)
    finally:
        current_backend.reset(token)
        exe.end()
    if sync:
        state.error()  # waits for the stream; a stored error is raised when the state is read
    if global_config.verbosity >= 2 and not stream:
        print(state.text())
    return state


def cache_program(program: SglFunction, backend: BaseBackend) -> str:
    """Prefill the program's constant prefix once; returns the prefix ("" when too short to bother)."""
    prefix = extract_prefix(program, backend.get_chat_template())
    if len(prefix) < global_config.precache_min_chars:
        return ""
    backend.cache_prefix(prefix)
    return prefix


def resolve_num_threads(num_threads: int | str, num_programs: int) -> int:
    if num_threads == "auto":
        # Programs mostly wait on the server: many more threads than cores keep it busy.
        num_threads = max(96, multiprocessing.cpu_count() * 16)
    return max(1, min(int(num_threads), num_programs))


def run_batch(
    runner: Runner,
    batch_kwargs: list[dict[str, Any]],
    num_threads: int | str,
    progress_bar: bool,
    generator_style: bool,
) -> list[ProgramState] | Iterator[ProgramState]:
    """Results come in input order, as a list or (generator_style) as a generator."""
    workers = resolve_num_threads(num_threads, len(batch_kwargs))
    states = _in_order(runner, batch_kwargs, workers, progress_bar)
    return states if generator_style else list(states)


def _in_order(runner: Runner, batch_kwargs: list[dict], workers: int, progress_bar: bool) -> Iterator[ProgramState]:
    bar = tqdm.tqdm(total=len(batch_kwargs)) if progress_bar else None
    # A bounded window of programs in flight: a generator consumer sees the first result early,
    # and a huge batch never queues all its futures at once.
    window = workers * 2
    in_flight: deque[Future] = deque()
    pool = ThreadPoolExecutor(workers, thread_name_prefix="sgl-batch")
    try:
        for kwargs in batch_kwargs:
            in_flight.append(_submit(pool, runner, kwargs, bar))
            if len(in_flight) >= window:
                yield in_flight.popleft().result()
        while in_flight:
            yield in_flight.popleft().result()
    finally:
        for future in in_flight:
            future.cancel()
        pool.shutdown(wait=True)
        if bar is not None:
            bar.close()


def _submit(pool: ThreadPoolExecutor, runner: Runner, kwargs: dict, bar: Any) -> Future:
    future = pool.submit(runner, kwargs)
    if bar is not None:
        future.add_done_callback(lambda _: bar.update())
    return future
