"""Anthropic's Messages API: POST /v1/messages (streaming included) and
/v1/messages/count_tokens, translated to the chat path the OpenAI routes run.

The app mounts `anthropic_router` and writes errors on paths under `ANTHROPIC_PREFIX` with
`anthropic_error_body`; there the API key may also come as `x-api-key`.
"""

from __future__ import annotations

from sglang.runtime.server.anthropic.responses import anthropic_error_body
from sglang.runtime.server.anthropic.routes import router as anthropic_router

ANTHROPIC_PREFIX = "/v1/messages"

__all__ = ["ANTHROPIC_PREFIX", "anthropic_error_body", "anthropic_router"]
