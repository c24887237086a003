"""`LiteLLM`: any model LiteLLM reaches (`openai/NAME` on an OpenAI-compatible server such as
ours, `anthropic/...`, `ollama/...`, ...), as upstream SGLang's frontend has it.

Calls go through `litellm.completion`, which must be installed (`pip install litellm`); the
constructor raises ImportError otherwise. The client parameters are upstream's (`api_key`,
`organization`, `base_url`, `timeout`, `max_retries`, `default_headers`).
- A chat API (`chat_api.chat_messages`): the messages go as they are.
- Parameters: `max_tokens`, `temperature`, `stop`, and `top_p`, `top_k`, `presence_penalty`,
  `frequency_penalty` when set (upstream's `to_litellm_kwargs`); setting any other
  (`min_tokens`, a regex, n > 1, ...) is a BackendCapabilityError.
- `token_usage` counts the prompt and completion tokens of every response.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.backend.chat_api import chat_messages, refuse_unsendable, set_fields
from sglang.frontend.backend.openai import TokenUsage
from sglang.frontend.chat_template import ChatTemplateLike, get_chat_template_by_model_path
from sglang.frontend.sampling_params import SamplingParams

UNSENDABLE = ("min_new_tokens", "n", "min_p", "ignore_eos", "stop_token_ids")
OPTIONAL = {"top_p": "top_p", "top_k": "top_k", "presence_penalty": "presence_penalty"}
OPTIONAL["frequency_penalty"] = "frequency_penalty"


def litellm_kwargs(params: SamplingParams) -> dict[str, Any]:
    """The `litellm.completion` arguments of `params`."""
    refuse_unsendable(params, UNSENDABLE, "LiteLLM completion")
    out: dict[str, Any] = {"max_tokens": params.max_new_tokens, "temperature": params.temperature}
    out.update(set_fields(params, OPTIONAL))
    if params.stop:
        out["stop"] = list(params.stop)
    return out


class LiteLLM(BaseBackend):
    is_chat_model = True

    def __init__(
        self,
        model_name: str,
        chat_template: ChatTemplateLike | None = None,
        api_key: str | None = None,
        organization: str | None = None,
        base_url: str | None = None,
        timeout: float | None = 600,
        max_retries: int | None = None,
        default_headers: Mapping[str, str] | None = None,
    ):
        try:
            import litellm
        except ImportError as e:
            raise ImportError(f"sgl.LiteLLM needs the litellm package (pip install litellm): {e}") from e
        super().__init__(chat_template or get_chat_template_by_model_path(model_name))
        self._litellm = litellm
        self.model_name = model_name
        client = {
            "api_key": api_key,
            "organization": organization,
            "base_url": base_url,
            "timeout": timeout,
            "max_retries": litellm.num_retries if max_retries is None else max_retries,
            "default_headers": default_headers,
        }
        self.client_params = {k: v for k, v in client.items() if v is not None}
        self.token_usage = TokenUsage()

    def get_model_name(self) -> str:
        return self.model_name

    def _completion(self, prompt: Prompt, params: SamplingParams, **extra: Any) -> Any:
        messages = chat_messages(prompt, "LiteLLM")
        kwargs = {**self.client_params, **litellm_kwargs(params), **extra}
        return self._litellm.completion(model=self.model_name, messages=messages, **kwargs)

    def _count(self, usage: Any) -> None:
        if usage is not None:
            self.token_usage.add(usage.prompt_tokens, usage.completion_tokens)

    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        out = self._completion(prompt, params)
        self._count(getattr(out, "usage", None))
        choice = out.choices[0]
        usage = getattr(out, "usage", None)
        counts = (
            None
            if usage is None
            else {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens}
        )
        return choice.message.content or "", {"finish_reason": choice.finish_reason, "usage": counts}

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        for chunk in self._completion(prompt, params, stream=True, stream_options={"include_usage": True}):
            self._count(getattr(chunk, "usage", None))
            if chunk.choices and chunk.choices[0].delta.content:
                yield chunk.choices[0].delta.content, {"finish_reason": chunk.choices[0].finish_reason}
