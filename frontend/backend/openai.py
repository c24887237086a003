"""`OpenAI`: any OpenAI-compatible server (OpenAI itself, our server's /v1, vLLM, ...).

- Chat models get the completed chat messages; a `gen` must therefore open the assistant turn
  (right after `sgl.assistant_begin()` / `with s.assistant():`), else BackendCapabilityError.
- Completion models get the prompt text.
- Parameters beyond the OpenAI API (top_k, min_p, regex for `dtype`, ...) are sent as extra body
  fields only when set, which SGLang-compatible servers honour and others may reject.
- `select` scores all choices in one /completions request with `echo=True` and `logprobs`
  (prompt logprobs); a server that does not return them gets a BackendCapabilityError naming why.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.backend.http import HttpClient, ServerError
from sglang.frontend.chat_template import ChatTemplateLike, get_chat_template_by_model_path
from sglang.frontend.choices import ChoicesDecision, ChoicesSamplingMethod, normalized_logprob
from sglang.frontend.errors import BackendCapabilityError
from sglang.frontend.sampling_params import SamplingParams

COMPLETION_MODEL_NAMES = frozenset({"gpt-3.5-turbo-instruct", "davinci-002", "babbage-002"})


@dataclass
class TokenUsage:
    """The tokens an API backend's requests used, summed over every request (thread-safe)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, prompt: int | None, completion: int | None) -> None:
        with self._lock:
            self.prompt_tokens += prompt or 0
            self.completion_tokens += completion or 0

    def reset(self) -> None:
        """Start counting again from zero (upstream's `token_usage.reset()`)."""
        self.prompt_tokens = self.completion_tokens = 0


class OpenAI(BaseBackend):
    def __init__(
        self,
        model_name: str,
        is_chat_model: bool | None = None,
        chat_template: ChatTemplateLike | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
    ):
        super().__init__(chat_template or get_chat_template_by_model_path(model_name))
        self.model_name = model_name
        self.is_chat_model = model_name not in COMPLETION_MODEL_NAMES if is_chat_model is None else is_chat_model
        self.supports_images = self.is_chat_model
        base_url = base_url or os.environ.get("OPENAI_BASE_URL") or "https://api.openai.com/v1"
        self.http = HttpClient(base_url, api_key or os.environ.get("OPENAI_API_KEY"))
        self.token_usage = TokenUsage()

    def get_model_name(self) -> str:
        return self.model_name

    def _request(self, prompt: Prompt, params: SamplingParams, stream: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model_name, **_openai_kwargs(params, self.is_chat_model)}
        if stream:
            body["stream"] = True
        if not self.is_chat_model:
            return "/completions", {**body, "prompt": prompt.text}
        if prompt.role != "assistant" or prompt.role_text.strip():
            raise BackendCapabilityError(
                f"{self.model_name} is a chat model: sgl.gen must start the assistant message "
                "(right after sgl.assistant_begin() or inside `with s.assistant():`), or use a completion model"
            )
        return "/chat/completions", {**body, "messages": list(prompt.messages)}

    def _count(self, usage: dict[str, Any] | None) -> None:
        if usage:
            self.token_usage.add(usage.get("prompt_tokens"), usage.get("completion_tokens"))

    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        path, body = self._request(prompt, params, stream=False)
        out = self.http.post(path, body)
        self._count(out.get("usage"))
        texts = [(c["message"]["content"] or "") if self.is_chat_model else c["text"] for c in out["choices"]]
        meta = {"finish_reason": [c.get("finish_reason") for c in out["choices"]], "usage": out.get("usage")}
        return (texts if params.n > 1 else texts[0]), meta

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        path, body = self._request(prompt, params, stream=True)
        for event in self.http.post_sse(path, body):
            self._count(event.get("usage"))
            for choice in event.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                piece = (choice.get("delta") or {}).get("content") if self.is_chat_model else choice.get("text")
                if piece:
                    yield piece, {"finish_reason": choice.get("finish_reason")}

    def select(
        self, prompt: Prompt, choices: list[str], temperature: float, choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        scored = self._echo_logprobs([prompt.text + c for c in choices], start=len(prompt.text))
        unconditional = None
        if choices_method.requires_unconditional_logprobs:
            unconditional = self._echo_logprobs(list(choices), start=0)
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=[normalized_logprob(t) for t in scored],
            input_token_logprobs=scored,
            output_token_logprobs=[[] for _ in choices],
            unconditional_token_logprobs=unconditional,
        )

    def _echo_logprobs(self, texts: list[str], start: int) -> list[list[tuple[float | None, None, str]]]:
        """Per text, (logprob, None, token) of the tokens overlapping text[start:], in one request."""
        body = {"model": self.model_name, "prompt": texts, "echo": True, "logprobs": 1, "max_tokens": 1}
        body["temperature"] = 0
        try:
            out = self.http.post("/completions", body)
        except ServerError as e:
            raise BackendCapabilityError(
                f"select() on {self.model_name} needs prompt logprobs from /completions (echo=True, logprobs); "
                f"the server refused: {e}"
            ) from e
        self._count(out.get("usage"))
        result: list[list[tuple[float | None, None, str]]] = [[] for _ in texts]
        for choice in out["choices"]:
            lp = choice.get("logprobs") or {}
            if not lp.get("text_offset"):
                raise BackendCapabilityError(f"{self.model_name}: /completions returned no prompt logprobs to score")
            i, end = choice.get("index", 0), len(texts[choice.get("index", 0)])
            for token, logprob, offset in zip(lp["tokens"], lp["token_logprobs"], lp["text_offset"]):
                if offset + len(token) > start and offset < end:
                    result[i].append((logprob, None, token))
        return result

    def shutdown(self) -> None:
        self.http.close()


def _openai_kwargs(params: SamplingParams, chat: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "max_tokens": params.max_new_tokens,
        "temperature": params.temperature,
        "top_p": params.top_p,
        "n": params.n,
        "frequency_penalty": params.frequency_penalty,
        "presence_penalty": params.presence_penalty,
    }
    if params.stop:
        out["stop"] = params.stop
    # Beyond the OpenAI API: only when the program asked for them.
    extras = {
        "top_k": params.top_k if params.top_k != -1 else None,
        "min_p": params.min_p or None,
        "min_tokens": params.min_new_tokens or None,
        "ignore_eos": params.ignore_eos or None,
        "stop_token_ids": params.stop_token_ids or None,
        "regex": params.constrained_regex(),
    }
    out.update({k: v for k, v in extras.items() if v is not None})
    if params.json_schema is not None:
        if chat:
            schema = {"name": "output", "schema": json.loads(params.json_schema)}
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        else:
            out["json_schema"] = params.json_schema
    return out
