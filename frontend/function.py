"""`@sgl.function`: a Python function whose first argument `s` is the program state.

Calling an sgl function:
- `f.run(**kwargs)` / `f(**kwargs)`: run it as a program (on the caller program's backend when
  called from inside another program, else the default backend);
- `f(s, ...)` with a program state first: inline, its body appends to that same state;
- inside a trace: traced as a stream of its own, so `compile()` sees the whole call graph.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from typing import Any

from sglang.frontend.config import global_config, resolve_backend
from sglang.frontend.run import cache_program, run_batch, run_program
from sglang.frontend.sampling_params import SamplingParams
from sglang.frontend.state import ProgramState
from sglang.frontend.tracer import TracerProgramState, current_tracer, trace_program


def default_sampling_params(
    max_new_tokens: int = 128,
    n: int = 1,
    stop: str | list[str] | None = None,
    stop_token_ids: list[int] | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = -1,
    min_p: float = 0.0,
    frequency_penalty: float = 0.0,
    presence_penalty: float = 0.0,
    ignore_eos: bool = False,
    return_logprob: bool | None = None,
    logprob_start_len: int | None = None,
    top_logprobs_num: int | None = None,
    return_text_in_logprobs: bool | None = None,
) -> SamplingParams:
    """The program-wide defaults from `run(...)`/`run_batch(...)` keyword arguments."""
    return SamplingParams(
        max_new_tokens=max_new_tokens,
        n=n,
        stop=[stop] if isinstance(stop, str) else list(stop or []),
        stop_token_ids=list(stop_token_ids or []),
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        frequency_penalty=frequency_penalty,
        presence_penalty=presence_penalty,
        ignore_eos=ignore_eos,
        return_logprob=return_logprob,
        logprob_start_len=logprob_start_len,
        top_logprobs_num=top_logprobs_num,
        return_text_in_logprobs=return_text_in_logprobs,
    )


_SAMPLING_NAMES = frozenset(inspect.signature(default_sampling_params).parameters)


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], SamplingParams]:
    sampling = {k: kwargs.pop(k) for k in list(kwargs) if k in _SAMPLING_NAMES}
    return kwargs, default_sampling_params(**sampling)


class SglFunction:
    def __init__(
        self,
        func: Callable[..., Any],
        num_api_spec_tokens: int | None = None,
        bind_arguments: dict[str, Any] | None = None,
    ):
        params = list(inspect.signature(func).parameters.values())
        if not params or params[0].name != "s":
            raise TypeError(f'the first argument of sgl function {func.__name__} must be "s"')
        self.func = func
        self.num_api_spec_tokens = num_api_spec_tokens
        self.bind_arguments = dict(bind_arguments or {})
        self.arg_names = [p.name for p in params[1:]]
        self.arg_defaults = {p.name: p.default for p in params[1:] if p.default is not p.empty}
        functools.update_wrapper(self, func)

    def bind(self, **kwargs: Any) -> SglFunction:
        unknown = set(kwargs) - set(self.arg_names)
        if unknown:
            raise TypeError(f"{self.func.__name__} has no arguments {sorted(unknown)}")
        return SglFunction(self.func, self.num_api_spec_tokens, {**self.bind_arguments, **kwargs})

    def run(self, *args: Any, backend: Any = None, stream: bool = False, **kwargs: Any) -> ProgramState:
        kwargs, params = _split(kwargs)
        return run_program(self, resolve_backend(backend), args, kwargs, params, stream=stream)

    def run_batch(
        self,
        batch_kwargs: list[dict[str, Any]] | list[tuple],
        *,
        backend: Any = None,
        num_threads: int | str = "auto",
        progress_bar: bool = False,
        generator_style: bool = False,
        **sampling: Any,
    ) -> list[ProgramState] | Iterator[ProgramState]:
        """Run one program per kwargs dict (or positional tuple); results in input order."""
        batch = [self._as_kwargs(item) for item in batch_kwargs]
        if not batch:
            return iter([]) if generator_style else []
        _, params = _split(sampling)
        engine = resolve_backend(backend)
        if global_config.enable_precache_with_tracing and len(batch) > 1:
            cache_program(self, engine)
        runner = functools.partial(_run_synced, self, engine, params)
        return run_batch(runner, batch, num_threads, progress_bar, generator_style)

    def _as_kwargs(self, item: dict[str, Any] | tuple | list) -> dict[str, Any]:
        if isinstance(item, dict):
            return dict(item)
        required = len([n for n in self.arg_names if n not in self.arg_defaults])
        if not isinstance(item, (tuple, list)) or not required <= len(item) <= len(self.arg_names):
            raise TypeError(f"run_batch item {item!r} does not match the arguments {self.arg_names}")
        return dict(zip(self.arg_names, item))

    def trace(self, *, backend: Any = None, **kwargs: Any) -> TracerProgramState:
        """The IR graph of the program; arguments not given are placeholders. Needs no backend."""
        return trace_program(self, kwargs)

    def compile(self, *, backend: Any = None) -> Any:
        from sglang.frontend.compiler import CompiledFunction

        return CompiledFunction(self, backend)

    def cache(self, backend: Any = None) -> str:
        """Prefill the program's constant prefix on the backend; returns the prefix."""
        return cache_program(self, resolve_backend(backend))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], (ProgramState, TracerProgramState)):
            return self.func(args[0], *args[1:], **{**kwargs, **self.bind_arguments})
        tracer = current_tracer()
        if tracer is not None:
            kwargs.pop("backend", None)
            return tracer.call(self, dict(zip(self.arg_names, args)) | kwargs)
        return self.run(*args, **kwargs)

    def __repr__(self) -> str:
        return f"SglFunction({self.func.__name__})"


def _run_synced(program: SglFunction, backend: Any, params: SamplingParams, kwargs: dict[str, Any]) -> ProgramState:
    return run_program(program, backend, (), kwargs, params, sync=True)
