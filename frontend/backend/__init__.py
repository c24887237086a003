"""Backends: where a program's generations run."""

from sglang.frontend.backend.anthropic import Anthropic
from sglang.frontend.backend.base import BaseBackend, Prompt
from sglang.frontend.backend.engine import EngineBackend
from sglang.frontend.backend.litellm import LiteLLM
from sglang.frontend.backend.openai import OpenAI
from sglang.frontend.backend.runtime import Runtime
from sglang.frontend.backend.runtime_endpoint import RuntimeEndpoint

__all__ = ["Anthropic", "BaseBackend", "EngineBackend", "LiteLLM", "OpenAI", "Prompt", "Runtime", "RuntimeEndpoint"]
