"""OpenAI's Responses API (/v1/responses), translated to the chat path the OpenAI routes run;
responses are stored, chained and run in the background with `--enable-response-store`.

The app mounts `responses_router`; errors are in the OpenAI shape, as on the other OpenAI routes.
"""

from __future__ import annotations

from sglang.runtime.server.responses_api.routes import router as responses_router

__all__ = ["responses_router"]
