"""One generation's outputs as a streamed response body, for the APIs whose streams carry one
output (Anthropic's, Ollama's; OpenAI's merge several choices, see `openai/streaming.py`).

Invariants, as there: an error before the first output is raised (the client gets a plain HTTP
error in the API's shape); one after it becomes the body's last piece, in the API's shape; when
the client goes away the body is cancelled, which closes the manager's iterator and aborts the
request, so no generation outlives its client.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import aclosing
from dataclasses import replace
from typing import Any

from sglang.runtime.processes.tokenizer_manager import TokenizerManager
from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.responses import first_output, openai_error

logger = logging.getLogger(__name__)

Output = dict[str, Any]


async def start_stream(
    manager: TokenizerManager, obj: GenerateInput, names: Mapping[str, str]
) -> tuple[Output, AsyncIterator[Output]]:
    """Starts `obj` (one prompt, one choice) streaming and waits for its first cumulative
    output; raises an ApiError (fields named as in `names`) if it fails before that."""
    outputs = manager.generate(replace(obj, stream=True))
    return await first_output(outputs, names), outputs


async def stream_body(
    first: Output,
    outputs: AsyncIterator[Output],
    render: Callable[[Output], list[bytes]],
    error: Callable[[ApiError], bytes],
    names: Mapping[str, str],
) -> AsyncIterator[bytes]:
    """The bytes `render` makes of each output in turn, or `error`'s once one fails."""
    async with aclosing(outputs):
        try:
            for piece in render(first):
                yield piece
            async for output in outputs:
                for piece in render(output):
                    yield piece
        except Exception as e:
            api = openai_error(e, names)
            if api is None:
                logger.exception("streaming a response failed")
                api = ApiError(500, f"internal error: {type(e).__name__}: {e}")
            yield error(api)
