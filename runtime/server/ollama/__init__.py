"""Ollama's API (/, /api/version, /api/tags, /api/show, /api/chat, /api/generate), translated to
the requests the OpenAI routes run.

The app mounts `ollama_router` and writes errors on paths under `OLLAMA_PREFIX` with
`ollama_error_body`.
"""

from __future__ import annotations

from sglang.runtime.server.ollama.responses import ollama_error_body
from sglang.runtime.server.ollama.routes import router as ollama_router

OLLAMA_PREFIX = "/api/"

__all__ = ["OLLAMA_PREFIX", "ollama_error_body", "ollama_router"]
