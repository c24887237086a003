"""A request as the scheduler tracks it: tokens, KV slots, sampling state, results so far.

Invariants: `slots[i]` holds the KV of `fill_ids[i]` for `i < kv_len`; the first
`match.num_cached` of them belong to the prefix cache (locked by `match`), the rest to this
request. A running request always has `kv_len < len(fill_ids)`: the next step computes
`fill_ids[kv_len:]` (one token when decoding, a chunk when prefilling).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, fields
from typing import Any

import torch

from sglang.runtime.memory.radix_cache import CACHE_NAMESPACE_BITS, MatchResult
from sglang.runtime.memory.storage_io import Prefetch
from sglang.runtime.processes.messages import DecodeSpec, GenerateRequest, LogprobDelta
from sglang.runtime.requests.finish_reason import BAD_REQUEST_STATUS, FinishReason
from sglang.runtime.requests.stop_regex import SEARCH_BUDGET_S, StopRegexTooSlow, first_match, longest_reach


@dataclass
class LogprobLog:
    """Log-probabilities collected so far, in SGLang's `(logprob, token_id)` pairs. `sent` holds,
    per list, how many entries earlier updates carried (`take_new`)."""

    input_token: list[tuple[float | None, int]] = field(default_factory=list)
    input_top: list[list[tuple[float, int]] | None] = field(default_factory=list)
    input_ids_logprob: list[list[tuple[float, int]] | None] = field(default_factory=list)
    output_token: list[tuple[float, int]] = field(default_factory=list)
    output_top: list[list[tuple[float, int]]] = field(default_factory=list)
    output_ids_logprob: list[list[tuple[float, int]]] = field(default_factory=list)
    output_entropy: list[float] = field(default_factory=list)
    sent: dict[str, int] = field(default_factory=dict)

    def take_new(self) -> LogprobDelta:
        """The entries recorded since the previous call (all of them on the first)."""
        new = {}
        for name in (f.name for f in fields(LogprobDelta)):
            entries = getattr(self, name)
            new[name] = entries[self.sent.get(name, 0) :]
            self.sent[name] = len(entries)
        return LogprobDelta(**new)


INTERNAL_ERROR_STATUS = 500


class Req:
    def __init__(
        self, request: GenerateRequest, eos_token_ids: frozenset[int], vocab_size: int, context_length: int
    ) -> None:
        self.rid = request.rid
        self.input_ids = list(request.input_ids)
        self.params = request.params
        self.logprobs = request.logprobs
        self.stream = request.stream
        self.priority = request.priority
        self.arrival_time = request.arrival_time
        self.admit_time: float | None = None
        """When the request was first admitted (monotonic; kept across retractions)."""
        self.trace = request.trace
        self.lora_name = request.lora_path
        self.bootstrap = request.bootstrap
        """Where its prefill server is, in prefill-decode disaggregation; None otherwise."""
        self.lora_slot: int | None = None
        """The LoRA slot this request holds while it runs (0: no adapter); None when it holds none."""
        self.cache_namespace = 0
        """Keys its prefixes in the radix cache (`cache_ids`): its adapter load's uid, 0 for the base."""
        self.output_ids: list[int] = []
        limit = context_length - len(self.input_ids)
        # None means "until the context is full", as in SGLang.
        self.max_new_tokens = limit if self.params.max_new_tokens is None else min(self.params.max_new_tokens, limit)
        self.slots = torch.empty(0, dtype=torch.int64)
        self.match: MatchResult | None = None
        self.cached_tokens = 0
        self.cached_tokens_details: dict[str, int | str] | None = None
        """`cached_tokens` per cache tier (device, host, storage); None without the hierarchical cache."""
        self.prefetch: Prefetch | None = None
        """The read of its stored prefix while it waits (hierarchical cache with a storage tier)."""
        self.finish_reason: FinishReason | None = None
        self.log = LogprobLog()
        self.grammar: Any = None
        self.grammar_future: Future | None = None
        self.grammar_error: str | None = None
        self.first_token_time: float | None = None
        self.sent_output_len = 0
        self.sent_meta = False
        self.generator: torch.Generator | None = None
        if self.params.seed is not None:
            self.generator = torch.Generator().manual_seed(self.params.seed)
        self.eos_token_ids = frozenset() if self.params.ignore_eos else eos_token_ids
        self.stop_token_ids = frozenset(self.params.stop_token_ids or ()) | self.eos_token_ids
        # Speculative decoding's counts (runtime/speculative/verify_step.py, TOTALS).
        self.spec_verify_ct = self.spec_draft_tokens = self.spec_accepted_tokens = 0
        self.retractions = 0
        """Times the request went back to the queue, its KV released (upstream's num_retractions)."""
        self.logit_bias: torch.Tensor | None = None
        if self.params.logit_bias:
            self.logit_bias = torch.zeros(vocab_size)
            for token, bias in self.params.logit_bias.items():
                self.logit_bias[int(token)] = bias

    @property
    def fill_ids(self) -> list[int]:
        return self.input_ids + self.output_ids

    def cache_ids(self, end: int) -> list[int]:
        """`fill_ids[:end]` as radix-cache keys: under an adapter every id is moved past the
        vocabulary by its namespace, so prefixes are shared only within one adapter load."""
        ids = self.fill_ids[:end]
        if not self.cache_namespace:
            return ids
        offset = self.cache_namespace << CACHE_NAMESPACE_BITS
        return [t + offset for t in ids]

    @property
    def kv_len(self) -> int:
        return len(self.slots)

    @property
    def num_cached(self) -> int:
        return self.match.num_cached if self.match is not None else 0

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def grammar_pending(self) -> bool:
        """True while the request's grammar compiles; then sets `grammar` or `grammar_error`."""
        if self.grammar_future is None:
            return False
        if not self.grammar_future.done():
            return True
        try:
            self.grammar = self.grammar_future.result()
        except ValueError as e:
            self.grammar_error = str(e)
        self.grammar_future = None
        return False

    def wants_input_logprobs(self) -> bool:
        return self.logprobs.return_logprob and self.logprobs.logprob_start_len >= 0

    def decode_spec(self) -> DecodeSpec:
        stop = self.params.stop
        return DecodeSpec(
            skip_special_tokens=self.params.skip_special_tokens,
            spaces_between_special_tokens=self.params.spaces_between_special_tokens,
            stop_strings=tuple([stop] if isinstance(stop, str) else stop or ()),
            trim_stop=not self.params.no_stop_trim,
            stop_regexes=tuple(self.params.stop_regex or ()),
        )

    def check_finished(self, tail_text: Callable[[list[int]], str]) -> None:
        """Sets `finish_reason` after a token was appended. A stop_regex that overruns its
        CPU budget aborts the request with 400: its pattern, not the server, is at fault."""
        try:
            self._check_finished(tail_text)
        except StopRegexTooSlow as e:
            self.abort(str(e))

    def _check_finished(self, tail_text: Callable[[list[int]], str]) -> None:
        if not self.output_ids:
            return
        last = self.output_ids[-1]
        out_len = len(self.output_ids)
        min_reached = out_len >= self.params.min_new_tokens
        if min_reached and last in self.stop_token_ids:
            self.finish_reason = FinishReason.stop(last)
        elif self.grammar is not None and self.grammar.is_terminated():
            self.finish_reason = FinishReason.stop(None)
        elif min_reached and (matched := self._matched_stop_string(tail_text)) is not None:
            self.finish_reason = FinishReason.stop(matched)
        elif min_reached and (pattern := self._matched_stop_regex(tail_text)) is not None:
            # As upstream, `matched` names the pattern; the detokenizer cuts the text where it matched.
            self.finish_reason = FinishReason.stop(pattern)
        elif out_len >= self.max_new_tokens:
            self.finish_reason = FinishReason.of_length(out_len)

    def _matched_stop_string(self, tail_text: Callable[[list[int]], str]) -> str | None:
        stops = self.decode_spec().stop_strings
        if not stops:
            return None
        # Every token carries at least one byte, so a stop string of n UTF-8 bytes spans at most
        # n tokens, ending at the newest one; one token more keeps a leading space the decoder
        # would drop. (Counting characters instead misses multi-byte ones split over tokens.)
        window = max(len(s.encode()) for s in stops) + 1
        text = tail_text(self.output_ids[-window:])
        return next((s for s in stops if s in text), None)

    def _matched_stop_regex(self, tail_text: Callable[[list[int]], str]) -> str | None:
        patterns = tuple(self.params.stop_regex or ())
        if not patterns:
            return None
        reach = longest_reach(patterns)
        # A match of n characters spans at most 4n UTF-8 bytes, so at most 4n tokens (+1 as above);
        # an unbounded pattern is searched for in the whole output.
        ids = self.output_ids if reach is None else self.output_ids[-(4 * reach + 1) :]
        found = first_match(patterns, tail_text(ids), budget_s=SEARCH_BUDGET_S)
        return None if found is None else found[0]

    def abort(self, message: str, status_code: int = BAD_REQUEST_STATUS) -> None:
        """Ends the request. `status_code` is the HTTP status its answer carries, as upstream's
        abort reasons do: 400 for what the request itself asked, 500 for a failure of ours."""
        self.finish_reason = FinishReason.abort(message, status_code)
