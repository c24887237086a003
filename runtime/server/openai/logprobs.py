"""SGLang's `(logprob, token_id)` lists in OpenAI's two logprob formats.

Completions (legacy): parallel lists `tokens`, `token_logprobs`, `top_logprobs` (token -> logprob)
and `text_offset` (where each token starts in the choice's text, prompt included under `echo`).
Chat: one entry per token with `token`, `logprob`, `bytes` and its `top_logprobs`.
Tokens are shown decoded one by one; a token holding part of a multi-byte character decodes to
U+FFFD, as in OpenAI. JSON has no infinity, so logprobs are clamped to `MIN_LOGPROB` (OpenAI's
own floor) rather than sent as null.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MIN_LOGPROB = -9999.0

TokenText = Callable[[int], str]
Pair = tuple[float | None, int]
TopRow = Sequence[tuple[float, int]] | None


def token_text(tokenizer: Any) -> TokenText:
    """Decodes single tokens, each once per use of the returned function (one per response)."""
    cache: dict[int, str] = {}

    def text(token_id: int) -> str:
        if token_id not in cache:
            cache[token_id] = tokenizer.decode([token_id])
        return cache[token_id]

    return text


def _clamped(logprob: float) -> float:
    return max(logprob, MIN_LOGPROB)


def _top_row(tops: Sequence[TopRow], i: int) -> TopRow:
    # Without top-k requested the manager sends empty top lists: every row is then empty.
    return tops[i] if i < len(tops) else ()


def completion_logprobs(
    pairs: Sequence[Pair], tops: Sequence[TopRow], text: TokenText, offset: int
) -> tuple[dict[str, Any], int]:
    """The completions `logprobs` object for `pairs` (with their top-k rows), the first token
    starting at character `offset`; also returns the offset after the last token, where the
    next chunk of a stream continues. An unscored token (the prompt's first, under `echo`) has
    a null logprob and null top row, as in OpenAI."""
    tokens, token_logprobs, top_logprobs, text_offset = [], [], [], []
    for i, (logprob, token_id) in enumerate(pairs):
        token = text(token_id)
        tokens.append(token)
        token_logprobs.append(None if logprob is None else _clamped(logprob))
        text_offset.append(offset)
        offset += len(token)
        row = _top_row(tops, i)
        if row is None or logprob is None:
            top_logprobs.append(None)
            continue
        top: dict[str, float] = {}
        for top_logprob, top_id in row:
            # Two tokens can decode alike (U+FFFD); the likelier, listed first, keeps the key.
            top.setdefault(text(top_id), _clamped(top_logprob))
        top_logprobs.append(top)
    body = {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top_logprobs}
    return {**body, "text_offset": text_offset}, offset


def _chat_entry(logprob: float, token_id: int, text: TokenText) -> dict[str, Any]:
    token = text(token_id)
    return {"token": token, "logprob": _clamped(logprob), "bytes": list(token.encode())}


def chat_logprobs(pairs: Sequence[Pair], tops: Sequence[TopRow], text: TokenText) -> list[dict[str, Any]]:
    """The chat `logprobs.content` list for output tokens `pairs` (always scored)."""
    content = []
    for i, (logprob, token_id) in enumerate(pairs):
        entry = _chat_entry(logprob if logprob is not None else MIN_LOGPROB, token_id, text)
        entry["top_logprobs"] = [_chat_entry(lp, t, text) for lp, t in _top_row(tops, i) or ()]
        content.append(entry)
    return content
