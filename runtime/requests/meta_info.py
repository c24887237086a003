"""SGLang's `meta_info` for one request, built in the tokenizer manager from the scheduler's
`RequestMeta` updates: the only place where a request's facts become the user's JSON.

Invariants:
- Each update's `LogprobDelta` holds only entries no earlier update held; `MetaInfo` appends
  them, so its lists equal the scheduler's whole log once the final update is in.
- Every output is cumulative, as upstream SGLang's default (non-incremental) streaming: each
  carries every logprob so far, and `output_token_logprobs_length` is their count.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from sglang.runtime.processes.messages import LogprobDelta, LogprobRequest, RequestMeta
from sglang.runtime.requests.finish_reason import FinishReason

_JSON_NAMES = {
    "input_token": "input_token_logprobs",
    "output_token": "output_token_logprobs",
    "input_top": "input_top_logprobs",
    "output_top": "output_top_logprobs",
    "input_ids_logprob": "input_token_ids_logprobs",
    "output_ids_logprob": "output_token_ids_logprobs",
}
"""`LogprobDelta` fields (entropy aside) and their `meta_info` names, in upstream's order."""


class MetaInfo:
    """One request's accumulated log-probabilities and its latest counts."""

    def __init__(self, want: LogprobRequest) -> None:
        self.want = want
        self.latest: RequestMeta | None = None
        self.logs: dict[str, list[Any]] = {f.name: [] for f in fields(LogprobDelta)}

    def add(self, meta: RequestMeta | None) -> None:
        if meta is None:
            return
        self.latest = meta
        if not (self.want.return_logprob or self.want.return_entropy):
            return  # `to_json` shows no log then: a streamed token skips seven empty extends
        for name, entries in self.logs.items():
            entries.extend(getattr(meta.logprobs, name))

    def to_json(self, rid: str, finish_reason: FinishReason | None, weight_version: str = "default") -> dict[str, Any]:
        """The `meta_info` of the output now; logprob fields only when asked for. Lists are
        copies: an output handed to a caller does not change as later updates arrive.
        `weight_version` is the server's label of its weights (upstream's field and default)."""
        out: dict[str, Any] = {"id": rid, "weight_version": weight_version}
        if (meta := self.latest) is not None:
            out |= {
                "prompt_tokens": meta.prompt_tokens,
                "completion_tokens": meta.completion_tokens,
                "cached_tokens": meta.cached_tokens,
                "cached_tokens_details": meta.cached_tokens_details,
                "num_retractions": meta.retractions,
            }
        out["finish_reason"] = None if finish_reason is None else finish_reason.to_json()
        if meta is not None:
            out["e2e_latency"] = meta.e2e_latency
            out |= {key: value for key in ("ttft", "itl") if (value := getattr(meta, key)) is not None}
            out |= speculative_fields(meta)
        if self.want.return_entropy:
            out["output_token_entropy"] = list(self.logs["output_entropy"])
        if self.want.return_logprob:
            for name, key in _JSON_NAMES.items():
                out[key] = list(self.logs[name])
            # What upstream's streaming clients read to find the new tokens of an update.
            out["output_token_logprobs_length"] = len(self.logs["output_token"])
            scored = [lp for lp, _ in self.logs["input_token"] if lp is not None]
            out["normalized_prompt_logprob"] = sum(scored) / len(scored) if scored else None
        return out


def speculative_fields(meta: RequestMeta) -> dict[str, Any]:
    """Upstream's speculative decoding fields, once the request took a decode step with
    speculation on: `spec_accept_length` is output tokens per decode step (the first token,
    from the prefill, included, as upstream counts it), `spec_accept_rate` the share of drafted
    tokens accepted. Unlike upstream, `spec_num_proposed_drafts` counts the drafts actually
    verified (NGRAM drafts nothing where no n-gram matches), not steps times the draft width."""
    if not meta.spec_verify_ct:
        return {}
    drafted, accepted = meta.spec_draft_tokens, meta.spec_accepted_tokens
    return {
        "spec_accept_rate": accepted / drafted if drafted else 0.0,
        "spec_accept_length": meta.completion_tokens / meta.spec_verify_ct,
        "spec_num_correct_drafts": accepted,
        "spec_num_proposed_drafts": drafted,
        "spec_verify_ct": meta.spec_verify_ct,
    }
