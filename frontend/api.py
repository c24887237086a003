"""The public primitives of the language: `sgl.function`, `sgl.gen`, `sgl.select`, roles, ..."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from sglang.frontend.choices import ChoicesSamplingMethod, token_length_normalized
from sglang.frontend.config import global_config, resolve_backend
from sglang.frontend.function import SglFunction
from sglang.frontend.ir import (
    SglExpr,
    SglExprList,
    SglGen,
    SglImage,
    SglRoleBegin,
    SglRoleEnd,
    SglSelect,
    SglSeparateReasoning,
    SglVideo,
    lift,
)
from sglang.frontend.sampling_params import GenParams, normalize_json_schema


def function(
    func: Callable[..., Any] | None = None, num_api_spec_tokens: int | None = None
) -> SglFunction | Callable[[Callable[..., Any]], SglFunction]:
    """`@sgl.function` or `@sgl.function(num_api_spec_tokens=N)`."""
    if func is not None:
        return SglFunction(func, num_api_spec_tokens=num_api_spec_tokens)
    return lambda f: SglFunction(f, num_api_spec_tokens=num_api_spec_tokens)


def set_default_backend(backend: Any) -> None:
    global_config.default_backend = backend


def flush_cache(backend: Any = None) -> None:
    resolve_backend(backend).flush_cache()


def get_server_info(backend: Any = None) -> dict[str, Any]:
    return resolve_backend(backend).get_server_info()


def gen(
    name: str | None = None,
    max_tokens: int | None = None,
    min_tokens: int | None = None,
    n: int | None = None,
    stop: str | list[str] | None = None,
    stop_token_ids: list[int] | None = None,
    temperature: float | None = None,
    top_p: float | None = None,
    top_k: int | None = None,
    min_p: float | None = None,
    frequency_penalty: float | None = None,
    presence_penalty: float | None = None,
    ignore_eos: bool | None = None,
    return_logprob: bool | None = None,
    logprob_start_len: int | None = None,
    top_logprobs_num: int | None = None,
    return_text_in_logprobs: bool | None = None,
    dtype: Any = None,
    choices: list[str] | None = None,
    choices_method: ChoicesSamplingMethod | None = None,
    regex: str | None = None,
    json_schema: Any = None,
) -> SglGen | SglSelect:
    """Generate text into variable `name`; with `choices`, the same as `select`."""
    if choices:
        return select(name, choices, 0.0 if temperature is None else temperature, choices_method)
    if regex is not None:
        re.compile(regex)  # fail here, in the program body, not on the server
    params = GenParams(
        max_new_tokens=max_tokens,
        min_new_tokens=min_tokens,
        n=n,
        stop=stop,
        stop_token_ids=stop_token_ids,
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
        dtype=dtype,
        regex=regex,
        json_schema=normalize_json_schema(json_schema),
    )
    return SglGen(name, params)


def gen_int(name: str | None = None, **kwargs: Any) -> SglGen | SglSelect:
    return gen(name, dtype=int, **kwargs)


def gen_string(name: str | None = None, **kwargs: Any) -> SglGen | SglSelect:
    return gen(name, dtype=str, **kwargs)


def select(
    name: str | None = None,
    choices: list[str] | None = None,
    temperature: float = 0.0,
    choices_method: ChoicesSamplingMethod | None = None,
) -> SglSelect:
    """Append the most likely of `choices` (scored by `choices_method`) and store it as `name`."""
    if not choices:
        raise ValueError("select() needs a non-empty list of choices")
    if temperature > 1e-5:
        raise ValueError("select() picks deterministically; only temperature=0 is supported")
    return SglSelect(name, list(choices), temperature, choices_method or token_length_normalized)


def image(path: str) -> SglImage:
    return SglImage(path)


def video(path: str, num_frames: int) -> SglVideo:
    return SglVideo(path, num_frames)


def separate_reasoning(expr: Any = None, model_type: str | None = None) -> SglExprList:
    """`expr`, then split the reasoning out of each gen/select in it into `<name>_reasoning_content`."""
    node = lift(expr) if expr is not None else None
    return SglExprList([*([node] if node is not None else []), SglSeparateReasoning(model_type, node)])


def _role(role: str, expr: Any = None) -> SglExprList:
    inner: list[SglExpr] = [lift(expr)] if expr is not None else []
    return SglExprList([SglRoleBegin(role), *inner, SglRoleEnd(role)])


def system(expr: Any = None) -> SglExprList:
    return _role("system", expr)


def user(expr: Any = None) -> SglExprList:
    return _role("user", expr)


def assistant(expr: Any = None) -> SglExprList:
    return _role("assistant", expr)


def system_begin() -> SglRoleBegin:
    return SglRoleBegin("system")


def system_end() -> SglRoleEnd:
    return SglRoleEnd("system")


def user_begin() -> SglRoleBegin:
    return SglRoleBegin("user")


def user_end() -> SglRoleEnd:
    return SglRoleEnd("user")


def assistant_begin() -> SglRoleBegin:
    return SglRoleBegin("assistant")


def assistant_end() -> SglRoleEnd:
    return SglRoleEnd("assistant")
