"""Structured output with xgrammar: JSON schema, regex and EBNF constraints.

Grammars compile on a worker thread, off the scheduling loop, and are cached by
(kind, source); a request waits in the queue until its grammar is ready, and one that fails to
compile is aborted with the compiler's message while the batch goes on.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import xgrammar as xgr

from sglang.runtime.requests.sampling_params import SamplingParams
from sglang.runtime.scheduler.req import Req

_LOG_PREFIX = re.compile(r"^\[[\d:]+\] \S+:\d+: ")


def compiler_message(error: Exception) -> str:
    """xgrammar's message without its C++ log prefix (`[10:17:44] /project/cpp/x.cc:94: `)."""
    return _LOG_PREFIX.sub("", str(error)).strip()


def grammar_key(params: SamplingParams) -> tuple[str, str] | None:
    for kind in ("json_schema", "regex", "ebnf"):
        source = getattr(params, kind)
        if source is not None:
            return kind, source
    return None


def token_allowed(bitmask: torch.Tensor, token: int) -> bool:
    """Whether bit `token` of a `[ceil(V / 32)]` int32 bitmask is set."""
    return bool((int(bitmask[token // 32]) >> (token % 32)) & 1)


class GrammarMatcher:
    """One request's position in its grammar. Invariant: it moves only by `accept`, one
    output token at a time; `walk_draft` leaves it where it found it."""

    def __init__(self, compiled: xgr.CompiledGrammar, vocab_size: int) -> None:
        self._matcher = xgr.GrammarMatcher(compiled)
        self._bitmask = xgr.allocate_token_bitmask(1, vocab_size)

    def next_token_bitmask(self) -> torch.Tensor:
        """`[ceil(V / 32)]` int32: bit `t` set where token `t` may come next."""
        self._matcher.fill_next_token_bitmask(self._bitmask)
        return self._bitmask[0].clone()

    def accept(self, token: int) -> None:
        if not self._matcher.accept_token(token):
            raise RuntimeError(f"token {token} violates the grammar after masking")

    def is_terminated(self) -> bool:
        return self._matcher.is_terminated()

    def walk_draft(self, draft: Sequence[int]) -> tuple[list[int], torch.Tensor]:
        """Speculative decoding: the longest prefix of `draft` the grammar allows from here, and
        `[len(prefix) + 1, ceil(V / 32)]` bitmasks, row `i` the one after `prefix[:i]` (what a
        verify step's row `i` is masked with). A drafted token that would end the grammar is
        cut too: the row after it would lie past the grammar's end. The matcher is rolled back
        to where it was, so the tokens the verify step keeps are accepted one by one after it."""
        rows = [self.next_token_bitmask()]
        kept = 0
        for token in draft:
            if not token_allowed(rows[-1], token) or not self._matcher.accept_token(token):
                break
            if self._matcher.is_terminated():
                self._matcher.rollback(1)
                break
            kept += 1
            rows.append(self.next_token_bitmask())
        if kept:
            self._matcher.rollback(kept)
        return list(draft[:kept]), torch.stack(rows)


class GrammarBackend:
    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int]) -> None:
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stop_token_ids)
        self.vocab_size = vocab_size
        self._compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=True)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar")
        self._cache: dict[tuple[str, str], Future] = {}
        self._lock = threading.Lock()

    @staticmethod
    def wants(params: SamplingParams) -> bool:
        return grammar_key(params) is not None

    def submit(self, req: Req) -> None:
        key = grammar_key(req.params)
        assert key is not None
        with self._lock:
            compiled = self._cache.get(key)
            if compiled is None:
                compiled = self._cache[key] = self._pool.submit(self._compile, *key)
        req.grammar_future = self._pool.submit(self._matcher, compiled)

    def release(self, req: Req) -> None:
        req.grammar = None

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _compile(self, kind: str, source: str) -> xgr.CompiledGrammar:
        try:
            if kind == "json_schema":
                return self._compiler.compile_json_schema(source)
            if kind == "regex":
                return self._compiler.compile_regex(source)
            return self._compiler.compile_grammar(source)
        except Exception as e:  # xgrammar raises RuntimeError and its own types
            raise ValueError(f"invalid {kind}: {compiler_message(e)}") from e

    def _matcher(self, compiled: Future) -> GrammarMatcher:
        return GrammarMatcher(compiled.result(), self.vocab_size)
