"""A scripted in-memory backend: deterministic replies, every call recorded."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.chat_template import ChatTemplateLike
from sglang.frontend.choices import ChoicesDecision, ChoicesSamplingMethod
from sglang.frontend.sampling_params import SamplingParams

Reply = Callable[[Prompt, SamplingParams], str]


class ScriptedBackend(BaseBackend):
    """`reply(prompt, params)` is the completion; `scores[choice]` the per-token logprobs of a choice."""

    def __init__(
        self,
        reply: Reply | None = None,
        *,
        chat_template: ChatTemplateLike | None = None,
        scores: dict[str, list[float]] | None = None,
        chunk_delay: float = 0.0,
        is_chat_model: bool = False,
    ):
        super().__init__(chat_template)
        self.reply = reply or (lambda prompt, params: "ok")
        self.scores = scores or {}
        self.chunk_delay = chunk_delay
        self.is_chat_model = is_chat_model
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    def _record(self, kind: str, value: Any) -> None:
        with self._lock:
            self.calls.append((kind, value))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.calls]

    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        self._record("generate", (prompt, params))
        text = self.reply(prompt, params)
        if params.n > 1:
            return [f"{text}{i}" for i in range(params.n)], {"n": params.n}
        return text, {"prompt_tokens": len(prompt.text), "completion_tokens": len(text)}

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        self._record("generate_stream", (prompt, params))
        text = self.reply(prompt, params)
        for i in range(0, len(text), 2):
            time.sleep(self.chunk_delay)
            yield text[i : i + 2], {"completion_tokens": i // 2 + 1}

    def select(
        self, prompt: Prompt, choices: list[str], temperature: float, choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        self._record("select", (prompt, choices))
        lps = [[(lp, None, None) for lp in self.scores.get(c, [-1.0])] for c in choices]
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=[sum(e[0] for e in t) / len(t) for t in lps],
            input_token_logprobs=lps,
            output_token_logprobs=[[] for _ in choices],
            unconditional_token_logprobs=[[(0.0, None, None)] * len(t) for t in lps],
        )

    def cache_prefix(self, prefix: str) -> None:
        self._record("cache_prefix", prefix)

    def commit_lazy_operations(self, prompt: Prompt) -> None:
        self._record("commit", prompt.text)
