"""Admission of one prompt: what it must satisfy before the scheduler sees it, checked on the
tokenizer manager's event loop so that bad input is a 400 before any work is queued.

A prompt is admitted when its ids lie in the vocabulary, leave room for one new token, and,
where the client set max_new_tokens, fit the context with it (upstream's check, in its words);
when its sampling parameters, logprob fields and grammar are valid; and when the adapter and the
disaggregation fields it names exist here. `--allow-auto-truncate` cuts over-long prompts and
max_new_tokens to the context instead of refusing them, as upstream's flag does.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from typing import Any

import xgrammar as xgr

from sglang.runtime.observability import request_stamps
from sglang.runtime.processes.messages import GenerateRequest, ReadyInfo
from sglang.runtime.processes.sessions import Sessions
from sglang.runtime.requests.generate_input import InvalidRequestError, SingleInput
from sglang.runtime.requests.sampling_params import SamplingParams

logger = logging.getLogger(__name__)


def _check_grammar(params: SamplingParams) -> None:
    """Parses a request's json_schema, regex or ebnf (cheap, no tokenizer needed), so that a
    malformed one is a 400 here rather than an aborted request after admission."""
    for kind, parse in (
        ("json_schema", xgr.Grammar.from_json_schema),
        ("regex", xgr.Grammar.from_regex),
        ("ebnf", xgr.Grammar.from_ebnf),
    ):
        source = getattr(params, kind)
        if source is None:
            continue
        try:
            parse(source)
        except Exception as e:  # xgrammar raises RuntimeError and its own types
            message = re.sub(r"^\[[^\]]*\]\s*\S+:\d+:\s*", "", str(e)).strip()
            raise InvalidRequestError(f"invalid {kind}: {message}", f"sampling_params.{kind}") from None


@dataclass
class Admission:
    """Turns a `SingleInput` into the `GenerateRequest` the scheduler runs, or refuses it with
    `InvalidRequestError` (HTTP 400)."""

    info: ReadyInfo
    tokenizer: Any
    allow_auto_truncate: bool = False
    lora_adapters: dict[str, str] = field(default_factory=dict)
    """Adapters the scheduler has loaded (name to path), as its last LoRA reply said."""
    sessions: Sessions | None = None
    """Where a prompt with `session_params` finds the turn it continues."""

    def __post_init__(self) -> None:
        self._max_token_chars = max((len(t) for t in self.tokenizer.get_vocab()), default=1)

    def prepare(self, item: SingleInput) -> GenerateRequest:
        """Tokenizes and validates one prompt; raises InvalidRequestError for bad input."""
        ids = item.input_ids if item.input_ids is not None else self._encode_within_context(item.text)
        if not ids:  # text of only characters the tokenizer drops (control characters, say)
            raise InvalidRequestError("the prompt has no tokens once tokenized", "text")
        vocab = self.info.vocab_size
        if any(t < 0 or t >= vocab for t in ids):
            raise InvalidRequestError(f"input_ids must lie in [0, {vocab})", "input_ids")
        if item.session is not None:
            ids = self._session_prompt(item, ids)
        ids = self._within_context(ids)
        self._check_total_length(len(ids), item)
        try:
            item.params.validate(vocab)
        except ValueError as e:
            raise InvalidRequestError(str(e), f"sampling_params.{getattr(e, 'field', '')}") from None
        lp = item.logprobs
        if lp.logprob_start_len < -1 or lp.logprob_start_len >= max(len(ids), 1):
            raise InvalidRequestError("logprob_start_len must lie in [-1, prompt length)", "logprob_start_len")
        if lp.top_logprobs_num < 0 or lp.top_logprobs_num > vocab:
            raise InvalidRequestError("top_logprobs_num must lie in [0, vocab size]", "top_logprobs_num")
        if any(not isinstance(t, int) or t < 0 or t >= vocab for t in lp.token_ids_logprob):
            raise InvalidRequestError("token_ids_logprob must be token ids", "token_ids_logprob")
        _check_grammar(item.params)
        if item.lora_path is not None:
            self.check_adapter(item.lora_path, "lora_path")
        if item.bootstrap is not None:
            self._check_bootstrap(item)
        if request_stamps.STAMPS is not None:
            request_stamps.STAMPS.stamp(item.rid, "tokenized")
        return GenerateRequest(
            item.rid,
            list(ids),
            item.params.normalize(),
            lp,
            stream=item.stream,
            priority=item.priority,
            lora_path=item.lora_path,
            bootstrap=item.bootstrap,
        )

    def _session_prompt(self, item: SingleInput, ids: list[int]) -> list[int]:
        """The continued turn's tokens and then `ids` (one sequence only: its turn is one output)."""
        if item.params.n != 1:
            raise InvalidRequestError("a session request takes one sequence (n = 1)", "n")
        if self.sessions is None:
            raise InvalidRequestError("sessions are not served here", "session_params")
        return self.sessions.prompt(item.session, ids, self.tokenizer.bos_token_id)

    def _check_bootstrap(self, item: SingleInput) -> None:
        """400 unless this server is one side of prefill-decode disaggregation and the request
        is one sequence (its room names one KV transfer)."""
        if self.info.disaggregation_mode == "null":
            raise InvalidRequestError(
                "bootstrap_room: prefill-decode disaggregation is off on this server "
                "(start it with --disaggregation-mode prefill or decode)",
                "bootstrap_room",
            )
        if item.params.n != 1:
            raise InvalidRequestError("n must be 1 in prefill-decode disaggregation (one room, one sequence)", "n")

    def check_adapter(self, name: str, param: str) -> None:
        """InvalidRequestError (400) unless `name` is a loaded LoRA adapter."""
        if not self.info.lora_enabled:
            raise InvalidRequestError("this server serves no LoRA adapters (start it with --enable-lora)", param)
        if not isinstance(name, str) or name not in self.lora_adapters:
            known = ", ".join(sorted(self.lora_adapters)) or "none"
            raise InvalidRequestError(f"LoRA adapter {name!r} is not loaded (loaded: {known})", param)

    def _within_context(self, ids: list[int]) -> list[int]:
        """`ids` when they leave room for one new token; else a 400, or with
        `--allow-auto-truncate` their first `context_length - 1` tokens (logged)."""
        context = self.info.context_length
        if len(ids) < context:
            return ids
        if not self.allow_auto_truncate:
            raise InvalidRequestError(f"the prompt has {len(ids)} tokens; the context length is {context}", "text")
        logger.warning("a prompt of %d tokens keeps its first %d (context length %d)", len(ids), context - 1, context)
        return ids[: context - 1]

    def _check_total_length(self, prompt_tokens: int, item: SingleInput) -> None:
        """Upstream's check of a max_new_tokens the client set: prompt + max_new_tokens over the
        context is a 400 in upstream's words (clients match them), or with
        `--allow-auto-truncate` a warning (the scheduler stops the request at the context)."""
        asked, context = item.params.max_new_tokens, self.info.context_length
        if not item.max_new_tokens_given or asked is None or prompt_tokens + asked <= context:
            return
        if self.allow_auto_truncate:
            logger.warning("max_new_tokens %d cut to %d (context length %d)", asked, context - prompt_tokens, context)
            return
        raise InvalidRequestError(
            f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested "
            f"a total of {prompt_tokens + asked} tokens: {prompt_tokens} tokens from the input messages and {asked} "
            "tokens for the completion. Please reduce the number of tokens in the input messages or the completion "
            "to fit within the limit.",
            "sampling_params.max_new_tokens",
        )

    def _encode_within_context(self, text: str) -> list[int]:
        """`text`'s ids, refusing one that cannot fit the context before tokenizing all of it (a
        client could otherwise hold the event loop for minutes): no token spans more characters
        than the vocabulary's longest entry, so a text longer than `context_length + 1` such
        tokens is first tokenized only that far; past the context there, it is refused. (Only
        the tokens the cut splits can differ from the whole text's. A tokenizer that collapses
        whitespace may make fewer tokens of the prefix; then the whole text is tokenized.)"""
        context = self.info.context_length
        reach = (context + 1) * self._max_token_chars
        if len(text) > reach:
            head = self.tokenizer.encode(text[:reach])
            if len(head) > context and self.allow_auto_truncate:
                return head  # `_within_context` keeps its start
            if len(head) > context:
                raise InvalidRequestError(
                    f"the prompt has over {context} tokens ({len(text)} characters); the context length is {context}",
                    "text",
                )
        return self.tokenizer.encode(text)
