"""`Anthropic`: a model behind Anthropic's Messages API (Anthropic itself, our server's
/v1/messages, or any server that speaks it), as upstream SGLang's frontend has it.

- A chat API (`chat_api.chat_messages`); a leading system message becomes the request's
  `system`, the other messages go as they are.
- Parameters: `max_tokens`, `temperature`, `stop_sequences`, and `top_p`, `top_k` when set
  (upstream's `to_anthropic_kwargs`); the API has no field for the others, so a program that
  sets one (`min_tokens`, a regex, penalties, n > 1, ...) gets a BackendCapabilityError.
- `token_usage` counts the input and output tokens of every response, as on `OpenAI`.
Requests carry the key as `x-api-key` and Anthropic's version header, as Anthropic's client
does; the base URL and the key default to `ANTHROPIC_BASE_URL` and `ANTHROPIC_API_KEY`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.backend.chat_api import chat_messages, refuse_unsendable, set_fields
from sglang.frontend.backend.http import HttpClient
from sglang.frontend.backend.openai import TokenUsage
from sglang.frontend.chat_template import get_chat_template
from sglang.frontend.sampling_params import SamplingParams

ANTHROPIC_VERSION = "2023-06-01"
"""The API version header every Messages request carries."""
UNSENDABLE = ("min_new_tokens", "n", "min_p", "frequency_penalty", "presence_penalty", "ignore_eos", "stop_token_ids")


def anthropic_kwargs(params: SamplingParams) -> dict[str, Any]:
    """The Messages request fields of `params`."""
    refuse_unsendable(params, UNSENDABLE, "Anthropic Messages")
    out = {"max_tokens": params.max_new_tokens, "temperature": params.temperature}
    out.update(set_fields(params, {"top_p": "top_p", "top_k": "top_k"}))
    if params.stop:
        out["stop_sequences"] = list(params.stop)
    return out


class Anthropic(BaseBackend):
    is_chat_model = True

    def __init__(self, model_name: str, *, base_url: str | None = None, api_key: str | None = None):
        super().__init__(get_chat_template("claude"))
        self.model_name = model_name
        base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or "https://api.anthropic.com"
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        headers = {"anthropic-version": ANTHROPIC_VERSION, **({"x-api-key": key} if key else {})}
        self.http = HttpClient(base_url.rstrip("/").removesuffix("/v1") + "/v1", headers=headers)
        self.token_usage = TokenUsage()

    def get_model_name(self) -> str:
        return self.model_name

    def _request(self, prompt: Prompt, params: SamplingParams) -> dict[str, Any]:
        messages = chat_messages(prompt, "Anthropic")
        body: dict[str, Any] = {"model": self.model_name, **anthropic_kwargs(params)}
        if messages[0]["role"] == "system":
            body["system"] = messages.pop(0)["content"]
        return {**body, "messages": messages}

    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        out = self.http.post("/messages", self._request(prompt, params))
        usage = out.get("usage") or {}
        self.token_usage.add(usage.get("input_tokens"), usage.get("output_tokens"))
        text = "".join(block["text"] for block in out["content"] if block["type"] == "text")
        counts = {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
        return text, {"finish_reason": out.get("stop_reason"), "usage": counts}

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        body = {**self._request(prompt, params), "stream": True}
        for event in self.http.post_sse("/messages", body):
            kind = event.get("type")
            if kind == "message_start":
                self.token_usage.add(event["message"]["usage"].get("input_tokens"), 0)
            elif kind == "message_delta":
                self.token_usage.add(0, event["usage"].get("output_tokens"))
            elif (
                kind == "content_block_delta" and event["delta"].get("type") == "text_delta" and event["delta"]["text"]
            ):
                yield event["delta"]["text"], {}

    def shutdown(self) -> None:
        self.http.close()
