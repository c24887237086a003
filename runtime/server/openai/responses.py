"""What every OpenAI response shares: ids and envelopes, finish reasons, usage, and errors.

Outputs are the tokenizer manager's dicts (`text`, `output_ids`, `meta_info`). Choices are
ordered prompt-major: with `n` samples per prompt, choice `i` belongs to prompt `i // n`, as in
the manager's flat result list.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from fastapi import Response

from sglang.runtime.processes.tokenizer_manager import TokenizerManager, last_item
from sglang.runtime.server.errors import ApiError, as_api_error


@dataclass(frozen=True)
class ResponseHeader:
    """The fields every response object and every chunk of one stream share."""

    id: str
    model: str
    created: int = field(default_factory=lambda: int(time.time()))

    @classmethod
    def new(cls, prefix: str, model: str) -> ResponseHeader:
        return cls(f"{prefix}-{uuid.uuid4().hex}", model)

    def envelope(self, obj: str, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model, "choices": choices, **extra}


def finish_reason(meta: dict[str, Any]) -> str | None:
    """OpenAI's `stop`/`length` for a finished output, None while it runs. An aborted request
    (its grammar did not compile, it cannot fit in the KV cache, an admin aborted it, its step
    failed) has no OpenAI finish reason and becomes an error with the abort's status."""
    reason = meta.get("finish_reason")
    if reason is None:
        return None
    if reason["type"] == "abort":
        raise ApiError(reason.get("status_code", 400), f"the request was aborted: {reason.get('message')}")
    return "length" if reason["type"] == "length" else "stop"


def matched_stop(meta: dict[str, Any]) -> int | str | None:
    """SGLang's extra choice field: the stop token id or string that ended the output."""
    reason = meta.get("finish_reason") or {}
    return reason.get("matched")


def usage(metas: Sequence[dict[str, Any]], n: int) -> dict[str, Any]:
    """OpenAI usage for choices with these final `meta_info`s. A prompt is counted once however
    many samples it has (every `n`-th choice starts a prompt); so are its cached tokens, which
    therefore never exceed `prompt_tokens`."""
    firsts = metas[::n]
    prompt = sum(m["prompt_tokens"] for m in firsts)
    completion = sum(m["completion_tokens"] for m in metas)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": sum(m.get("cached_tokens", 0) for m in firsts)},
    }


def sglext(metas: Sequence[dict[str, Any]], wanted: bool) -> dict[str, Any]:
    """Upstream's `sglext` extension of a response, when `return_cached_tokens_details` asked for
    it and the server knows the split (the hierarchical cache is on): the first prompt's
    `cached_tokens_details`."""
    details = metas[0].get("cached_tokens_details") if wanted and metas else None
    return {"sglext": {"cached_tokens_details": details}} if details else {}


def openai_error(error: Exception, names: Mapping[str, str]) -> ApiError | None:
    """`as_api_error`, with the offending field named as the client sent it: the runtime's
    name (`sampling_params.` stripped) looked up in `names` (see `sampling.native_names`)."""
    api = as_api_error(error)
    if api is None or api.param is None:
        return api
    name = api.param.removeprefix("sampling_params.")
    return ApiError(api.status, api.message, names.get(name, name), api.headers)


async def run_to_end(manager: TokenizerManager, obj: Any, names: Mapping[str, str]) -> list[dict[str, Any]]:
    """The final outputs of a non-streaming request, one per choice in choice order."""
    try:
        out = await last_item(manager.generate(obj))
    except Exception as e:
        api = openai_error(e, names)
        if api is None:
            raise
        raise api from e
    return out if isinstance(out, list) else [out]


async def first_output(outputs: AsyncIterator[dict[str, Any]], names: Mapping[str, str]) -> dict[str, Any]:
    """The first output of a stream; a failure before it closes `outputs` and is an ApiError
    (so a stream that cannot start is an HTTP error, not an error event)."""
    try:
        return await anext(outputs)
    except Exception as e:
        await outputs.aclose()
        api = openai_error(e, names)
        if api is None:
            raise
        raise api from e


def json_response(body: dict[str, Any]) -> Response:
    return Response(orjson.dumps(body), media_type="application/json")
