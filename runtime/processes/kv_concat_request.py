"""The front half of `/concat_and_append` (parallel encoding for the frontend's
`join("concate_and_append")`), run in the tokenizer manager's process.

`ConcatInput` validates a request; `run_concat` tokenizes the prefix P and each P + B_i exactly as
the branches' own requests were tokenized (the text of the prefix followed by the branch's text),
first prefills any branch token the cache lacks (typically the last token a branch sampled: a
finished request never computes its KV) with a `max_new_tokens=0` request, and then asks the
scheduler, whose half (`runtime/scheduler/kv_concat.py`) assembles the cached KV.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang.runtime.processes.control import ConcatAndAppend, ConcatResult
from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError

if TYPE_CHECKING:
    from sglang.runtime.processes.tokenizer_manager import TokenizerManager


@dataclass(frozen=True)
class ConcatInput:
    """A `/concat_and_append` request: `prefix` and `branches` are all text (each branch the text
    the fork appended after the prefix) or all token ids (each branch the ids after the prefix).
    `prefill_missing` first computes branch tokens the cache lacks."""

    prefix: str | list[int]
    branches: list[str] | list[list[int]]
    prefill_missing: bool = True

    @classmethod
    def from_dict(cls, body: Any) -> ConcatInput:
        """Validates a request body; raises InvalidRequestError (HTTP 400)."""
        if not isinstance(body, dict):
            raise InvalidRequestError("the request body must be a JSON object")
        unknown = set(body) - {"prefix", "branches", "prefill_missing"}
        if unknown:
            raise InvalidRequestError(f"unknown field(s): {', '.join(sorted(unknown))}", sorted(unknown)[0])
        prefix, branches = body.get("prefix"), body.get("branches")
        prefill = body.get("prefill_missing", True)
        if isinstance(prefix, str):
            if not isinstance(branches, list) or not all(isinstance(b, str) for b in branches):
                raise InvalidRequestError("with a text prefix, branches must be a list of strings", "branches")
        elif _is_ids(prefix):
            if not isinstance(branches, list) or not all(_is_ids(b) for b in branches):
                raise InvalidRequestError("with input_ids as prefix, branches must be lists of token ids", "branches")
        else:
            raise InvalidRequestError("prefix must be a string or a list of token ids", "prefix")
        if not branches:
            raise InvalidRequestError("give at least one branch", "branches")
        if not isinstance(prefill, bool):
            raise InvalidRequestError("prefill_missing must be a boolean", "prefill_missing")
        return cls(prefix, branches, prefill)

    def tokenize(self, encode: Callable[[str], list[int]]) -> tuple[list[int], list[list[int]], str | None]:
        """(prefix ids, each branch's ids after them, None) or, when the tokens of prefix + branch
        do not start with the prefix's own (a token spans the boundary), a reason instead."""
        if not isinstance(self.prefix, str):
            return list(self.prefix), [list(b) for b in self.branches], None
        prefix = encode(self.prefix)
        branches = []
        for i, text in enumerate(self.branches):
            ids = encode(self.prefix + text)
            if ids[: len(prefix)] != prefix:
                return prefix, [], f"branch {i}: a token spans the boundary between the prefix and the branch"
            branches.append(ids[len(prefix) :])
        return prefix, branches, None


def _is_ids(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


async def run_concat(manager: TokenizerManager, obj: ConcatInput) -> dict[str, Any]:
    """Serves one request: `{"ok", "input_ids", "cached_tokens", "copied_tokens", "reason",
    "prefix_tokens"}`, plus, for text, `text_match_tokens`: how many leading tokens of the
    tokenized `prefix + "".join(branches)` equal `input_ids` (what a later request sending that
    text reuses). Not ok is an answer, not an error: the caller appends the text instead."""
    prefix, branches, reason = obj.tokenize(manager.tokenizer.encode)
    sequence = prefix + [t for b in branches for t in b]
    extra: dict[str, Any] = {"prefix_tokens": len(prefix)}
    if isinstance(obj.prefix, str):
        text_ids = manager.tokenizer.encode(obj.prefix + "".join(obj.branches))
        extra["text_match_tokens"] = _common_prefix(text_ids, sequence)
    if reason is None and len(sequence) >= manager.info.context_length:
        reason = f"the concatenation has {len(sequence)} tokens; the context length is {manager.info.context_length}"
    if reason is not None:
        return {**ConcatResult(False, sequence, reason=reason).to_json(), **extra}
    warm = [prefix + b for b in branches if prefix + b]
    if obj.prefill_missing and warm:
        async for _ in manager.generate(GenerateInput(input_ids=warm, sampling_params={"max_new_tokens": 0})):
            pass
    result = await manager.control(ConcatAndAppend(tuple(prefix), tuple(tuple(b) for b in branches)))
    return {**result.to_json(), **extra}


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
