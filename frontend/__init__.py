"""The SGLang frontend language (upstream `sglang.lang`): programs, primitives, interpreter, backends.

Everything a program needs is re-exported by `sglang` itself (`import sglang as sgl`).
"""

from sglang.frontend.api import (
    assistant,
    assistant_begin,
    assistant_end,
    flush_cache,
    function,
    gen,
    gen_int,
    gen_string,
    get_server_info,
    image,
    select,
    separate_reasoning,
    set_default_backend,
    system,
    system_begin,
    system_end,
    user,
    user_begin,
    user_end,
    video,
)
from sglang.frontend.backend import Anthropic, BaseBackend, EngineBackend, LiteLLM, OpenAI, Runtime, RuntimeEndpoint
from sglang.frontend.chat_template import ChatTemplate, get_chat_template, get_chat_template_by_model_path
from sglang.frontend.choices import (
    greedy_token_selection,
    token_length_normalized,
    unconditional_likelihood_normalized,
)
from sglang.frontend.config import global_config
from sglang.frontend.errors import BackendCapabilityError, ProgramError, TracingError
from sglang.frontend.function import SglFunction
from sglang.frontend.state import ProgramState, ProgramStateGroup

__all__ = [
    "Anthropic",
    "BackendCapabilityError",
    "BaseBackend",
    "ChatTemplate",
    "EngineBackend",
    "LiteLLM",
    "OpenAI",
    "ProgramError",
    "ProgramState",
    "ProgramStateGroup",
    "Runtime",
    "RuntimeEndpoint",
    "SglFunction",
    "TracingError",
    "assistant",
    "assistant_begin",
    "assistant_end",
    "flush_cache",
    "function",
    "gen",
    "gen_int",
    "gen_string",
    "get_chat_template",
    "get_chat_template_by_model_path",
    "get_server_info",
    "global_config",
    "greedy_token_selection",
    "image",
    "select",
    "separate_reasoning",
    "set_default_backend",
    "system",
    "system_begin",
    "system_end",
    "token_length_normalized",
    "unconditional_likelihood_normalized",
    "user",
    "user_begin",
    "user_end",
    "video",
]
