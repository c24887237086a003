"""A backend speaking SGLang's native generate protocol, whatever carries it (HTTP or in-process).

Request bodies are those of upstream SGLang's `/generate` (`GenerateReqInput`): `text` (or a list
of texts), `sampling_params`, `stream`, `return_logprob`, `logprob_start_len`, `top_logprobs_num`,
`return_text_in_logprobs`, `image_data`. Responses are `{"text", "meta_info"}` (a list of them for
a list of texts, or for n > 1); streamed responses carry the cumulative text so far.

Logprob entries are `[logprob, token_id, token_text]`; `input_token_logprobs[j]` is the logprob of
input token `logprob_start_len + j` (None for a sequence's first token).

`select` costs two requests (three for `unconditional_likelihood_normalized`):
1. prefill the shared prefix once (`max_new_tokens=0`), which also tells its token count;
2. score every choice in one batched request, so each choice's prefill reuses the cached prefix.
   Logprobs start two tokens before the prefix's end, because the prompt's last tokens may merge
   with the choice's first characters ("A: " + "Paris" is tokenized "A", ":", " Paris", one token
   fewer than "A: " alone); the entries that end inside the prompt text are then dropped, so each
   choice is scored over exactly the tokens that carry its own text (token healing, as upstream);
3. (if the method needs it) score the choices' tokens alone, with no prompt.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Iterator
from typing import Any

from sglang.frontend.backend.base import BaseBackend, Completion, Prompt
from sglang.frontend.chat_template import (
    ChatTemplateLike,
    get_chat_template,
    get_chat_template_by_model_path,
)
from sglang.frontend.choices import ChoicesDecision, ChoicesSamplingMethod, normalized_logprob
from sglang.frontend.config import global_config
from sglang.frontend.jinja_template import JinjaChatTemplate
from sglang.frontend.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


class NativeBackend(BaseBackend):
    supports_images = True  # the server decides; it answers an error for a text-only model
    _concat_supported = True  # until the server says it has no /concat_and_append

    def __init__(self, model_info: dict[str, Any], chat_template_name: str | None = None):
        self.model_info = model_info
        super().__init__(self._pick_template(model_info, chat_template_name))
        if model_info.get("has_image_understanding") is False:
            self.supports_images = False

    @staticmethod
    def _pick_template(info: dict[str, Any], name: str | None) -> ChatTemplateLike:
        """An explicit name, else the model's own template, else a guess from the model path."""
        if name:
            return get_chat_template(name)
        source = info.get("chat_template")
        if isinstance(source, str) and source.strip():
            return JinjaChatTemplate(
                source, bos_token=info.get("bos_token") or "", eos_token=info.get("eos_token") or ""
            )
        return get_chat_template_by_model_path(info.get("model_path") or "")

    # ---- transport, provided by subclasses ----

    @abstractmethod
    def _generate(self, body: dict[str, Any]) -> Any:
        """One /generate call; the decoded response."""

    @abstractmethod
    def _generate_stream(self, body: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """One streamed /generate call; the decoded events (cumulative text)."""

    def _concat_and_append(self, body: dict[str, Any]) -> dict[str, Any] | None:
        """One /concat_and_append call (our extension); None when the server does not have it."""
        return None

    # ---- requests ----

    def get_model_name(self) -> str:
        return str(self.model_info.get("model_path", "unknown"))

    def _body(self, prompt: Prompt, params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "text": prompt.text,
            "sampling_params": {
                "skip_special_tokens": global_config.skip_special_tokens_in_output,
                "spaces_between_special_tokens": global_config.spaces_between_special_tokens_in_out,
                **params.to_srt_kwargs(),
            },
        }
        body.update(params.logprob_fields())
        self._add_images(body, prompt, copies=None)
        return body

    @staticmethod
    def _add_images(body: dict[str, Any], prompt: Prompt, copies: int | None) -> None:
        if not prompt.images:
            return
        data: Any = [im.base64 for im in prompt.images]
        data = data[0] if len(data) == 1 else data
        body["image_data"] = data if copies is None else [data] * copies

    def generate(self, prompt: Prompt, params: SamplingParams) -> Completion:
        out = self._generate(self._body(prompt, params))
        if isinstance(out, list):
            return [o["text"] for o in out], {"choices": [o["meta_info"] for o in out]}
        return out["text"], out["meta_info"]

    def generate_stream(self, prompt: Prompt, params: SamplingParams) -> Iterator[tuple[str, dict[str, Any]]]:
        body = self._body(prompt, params)
        body["stream"] = True
        sent = 0
        for event in self._generate_stream(body):
            text = event["text"]
            if len(text) > sent:
                yield text[sent:], event.get("meta_info", {})
                sent = len(text)

    def _prefill(self, prompt: Prompt | None, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {"text": text, "sampling_params": {"max_new_tokens": 0}}
        if prompt is not None:
            self._add_images(body, prompt, copies=None)
        return self._generate(body)

    def cache_prefix(self, prefix: str) -> None:
        self._prefill(None, prefix)

    def commit_lazy_operations(self, prompt: Prompt) -> None:
        self._prefill(prompt, prompt.text)

    def concatenate_and_append(self, prompt: Prompt, branches: list[str]) -> bool:
        """Parallel encoding on a server with `/concat_and_append` (ours): it caches the prefix
        followed by the branches from the branches' own KV, and the stream's next request (plain
        text) reuses it. A server without it is asked once; a refusal (a branch evicted, a token
        spanning a boundary, page_size > 1) leaves plain text concatenation."""
        if prompt.images or not self._concat_supported:
            return False
        out = self._concat_and_append({"prefix": prompt.text, "branches": branches})
        if out is None:
            self._concat_supported = False
            return False
        if not out.get("ok"):
            logger.info("concate_and_append joins text only: %s", out.get("reason"))
        return bool(out.get("ok"))

    def select(
        self, prompt: Prompt, choices: list[str], temperature: float, choices_method: ChoicesSamplingMethod
    ) -> ChoicesDecision:
        prefix_len = self._prefill(prompt, prompt.text)["meta_info"]["prompt_tokens"]
        start = max(prefix_len - HEALED_TOKENS, 0)
        body: dict[str, Any] = {
            "text": [prompt.text + c for c in choices],
            "sampling_params": {"max_new_tokens": 0, "temperature": 0},
            "return_logprob": True,
            "return_text_in_logprobs": True,
            "logprob_start_len": start,
        }
        self._add_images(body, prompt, copies=len(choices))
        scored = self._generate(body)
        input_lps = [
            choice_token_logprobs(
                r["meta_info"]["input_token_logprobs"], prompt.text, prompt.text + c, prefix_len - start
            )
            for r, c in zip(scored, choices)
        ]
        output_lps = [r["meta_info"].get("output_token_logprobs") or [] for r in scored]
        unconditional = None
        if choices_method.requires_unconditional_logprobs:
            alone = self._generate(
                {
                    "input_ids": [[e[1] for e in lps] for lps in input_lps],
                    "sampling_params": {"max_new_tokens": 0},
                    "return_logprob": True,
                    "return_text_in_logprobs": True,
                    "logprob_start_len": 0,
                }
            )
            unconditional = [r["meta_info"]["input_token_logprobs"] for r in alone]
        return choices_method(
            choices=choices,
            normalized_prompt_logprobs=[normalized_logprob(lps) for lps in input_lps],
            input_token_logprobs=input_lps,
            output_token_logprobs=output_lps,
            unconditional_token_logprobs=unconditional,
        )


HEALED_TOKENS = 2
"""How many of the prompt's last tokens `select` rescores, in case the choice merged with them."""


def choice_token_logprobs(entries: list[Any], prompt: str, full: str, prompt_entries: int) -> list[Any]:
    """The entries of `full` = `prompt` + choice that carry choice text (end past the prompt).

    `entries` are `[logprob, token_id, token_text]` of the last tokens of `full`. When their texts
    do not spell the end of `full` (a character split across tokens), the first `prompt_entries`
    entries are taken to be the prompt's, as without healing.
    """
    texts = [e[2] if len(e) > 2 and isinstance(e[2], str) else None for e in entries]
    if None in texts or not full.endswith("".join(texts)):
        return list(entries[prompt_entries:])
    offset = len(full) - len("".join(texts))
    kept = []
    for entry, text in zip(entries, texts):
        offset += len(text)
        if offset > len(prompt):
            kept.append(entry)
    return kept
