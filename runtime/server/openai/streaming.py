"""Server-sent events for both endpoints: one generation per choice, merged, as SSE chunks.

A streamed request is split into one streaming generation per choice (`per_choice_inputs`),
whose outputs are merged as they come (`merged`), so that each choice is its own request with
its own request id. Invariants:
- errors before the first output (bad input, queue full, prompt too long) are raised, so the
  client gets a plain HTTP error; after it, they become one `data: {"error": ...}` event;
- every stream ends with `data: [DONE]`;
- when the client goes away, the response body is cancelled and that cancellation reaches every
  manager iterator, whose `finally` aborts its request (no generation outlives its client).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any

import orjson
from fastapi import Response
from fastapi.responses import StreamingResponse

from sglang.runtime.processes.merged_streams import Event, merged
from sglang.runtime.processes.tokenizer_manager import TokenizerManager
from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError, error_body
from sglang.runtime.server.openai.responses import (
    ResponseHeader,
    first_output,
    json_response,
    openai_error,
    run_to_end,
    sglext,
    usage,
)

logger = logging.getLogger(__name__)

SSE_DONE = b"data: [DONE]\n\n"


class Chunker(ABC):
    """Turns merged outputs into response chunks; the subclasses (chat, completions) say how a
    choice's output becomes a chunk, this class owns the envelope and the closing usage chunk.
    Invariant: with `include_usage`, every chunk has a `usage` key, null but on the last one,
    which has no choices (OpenAI's shape)."""

    def __init__(self, header: ResponseHeader, obj: str, n: int, include_usage: bool) -> None:
        self.header, self.obj, self.n, self.include_usage = header, obj, n, include_usage
        self.finals: dict[int, dict[str, Any]] = {}
        self.cached_details = False

    @abstractmethod
    def chunks(self, index: int, output: dict[str, Any]) -> list[dict[str, Any]]:
        """Chunks for the newest cumulative `output` of choice `index` (may be none); a
        subclass calls `finished` with a choice's final `meta_info`."""

    def chunk(self, choices: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        if self.include_usage:
            extra.setdefault("usage", None)
        return self.header.envelope(self.obj, choices, **extra)

    def finished(self, index: int, meta: dict[str, Any]) -> None:
        self.finals[index] = meta

    def final(self) -> list[dict[str, Any]]:
        """Chunks after every choice finished, with no choices: upstream's `sglext` chunk and the
        usage chunk, each when asked for."""
        metas = [self.finals[i] for i in sorted(self.finals)]
        extension = sglext(metas, self.cached_details)
        chunks = [self.chunk([], **extension)] if extension else []
        return [*chunks, self.chunk([], usage=usage(metas, self.n))] if self.include_usage else chunks


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def per_choice_inputs(obj: GenerateInput) -> list[GenerateInput]:
    """`obj` (one or many prompts, one `sampling_params` dict with `n`) as one streaming input
    per choice, in choice order. Sample `j` gets seed `seed + j`, and the client's request id
    (one, or one per prompt) the suffix `-j`, as the manager does for n > 1."""
    if obj.text is not None:
        prompts: list[Any] = obj.text if isinstance(obj.text, list) else [obj.text]
    else:
        prompts = list(obj.input_ids) if obj.is_batch else [obj.input_ids]
    params = dict(obj.sampling_params or {})
    n, seed = params.get("n", 1), params.get("seed")
    if isinstance(obj.rid, list) and len(obj.rid) != len(prompts):
        raise ApiError(400, f"rid has {len(obj.rid)} entries for {len(prompts)} prompts", "rid")
    inputs = []
    for i, prompt in enumerate(prompts):
        for j in range(n):
            one = {**params, "n": 1, "seed": None if seed is None else seed + j}
            text, ids = (prompt, None) if obj.text is not None else (None, prompt)
            rid = _choice_rid(obj.rid, i, j, n, len(prompts))
            inputs.append(replace(obj, text=text, input_ids=ids, sampling_params=one, stream=True, rid=rid))
    return inputs


def _choice_rid(rid: str | list[str] | None, prompt: int, j: int, n: int, count: int) -> str | None:
    """Choice `j` of prompt `prompt`'s request id: ids must be unique among those in flight."""
    if rid is None:
        return None
    if isinstance(rid, list):
        return rid[prompt] if n == 1 else f"{rid[prompt]}-{j}"
    return rid if count * n == 1 else f"{rid}-{prompt * n + j}"


@dataclass
class ChoiceCursor:
    """How much of one choice's cumulative output its stream has sent: `chars` of text,
    `tokens` output tokens' logprobs, `offset` (completions' `text_offset` of the next token)."""

    chars: int = 0
    tokens: int = 0
    offset: int = 0
    started: bool = False

    def new_text(self, text: str) -> str:
        """The part of the cumulative `text` not sent yet (the detokenizer never takes text back)."""
        piece = text[self.chars :]
        self.chars = max(self.chars, len(text))
        return piece

    def new_tokens(self, meta: dict[str, Any]) -> tuple[list[Any], list[Any]]:
        """The output tokens' `(logprob, id)` pairs and top rows not sent yet."""
        pairs = meta.get("output_token_logprobs") or []
        tops = meta.get("output_top_logprobs") or []
        start, self.tokens = self.tokens, len(pairs)
        return pairs[start:], tops[start:]


async def open_stream(
    manager: TokenizerManager, obj: GenerateInput, chunker: Chunker, names: Mapping[str, str]
) -> StreamingResponse:
    """Starts one generation per choice of `obj` and waits for the first output, so that an
    early error is an HTTP error; then the rest streams as SSE."""
    events = merged([manager.generate(one) for one in per_choice_inputs(obj)])
    first = await first_output(events, names)
    return StreamingResponse(_body(first, events, chunker, names), media_type="text/event-stream")


async def _body(
    first: Event, events: AsyncIterator[Event], chunker: Chunker, names: Mapping[str, str]
) -> AsyncIterator[bytes]:
    async with aclosing(events):
        try:
            for chunk in chunker.chunks(*first):
                yield sse(chunk)
            async for index, output in events:
                for chunk in chunker.chunks(index, output):
                    yield sse(chunk)
            for chunk in chunker.final():
                yield sse(chunk)
        except Exception as e:
            api = openai_error(e, names)
            if api is None:
                logger.exception("streaming a response failed")
                api = ApiError(500, f"internal error: {type(e).__name__}: {e}")
            yield sse(error_body(api.status, api.message, api.param))
    yield SSE_DONE


async def respond(
    manager: TokenizerManager,
    obj: GenerateInput,
    chunker: Chunker | None,
    build: Callable[[list[dict[str, Any]]], dict[str, Any]],
    names: Mapping[str, str],
) -> Response:
    """Streams `obj` through `chunker`, or (without one) answers `build(final outputs)`."""
    if chunker is not None:
        return await open_stream(manager, obj, chunker, names)
    return json_response(build(await run_to_end(manager, obj, names)))
