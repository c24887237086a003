"""Turns one step's logits into next tokens and log-probabilities, row by row per request.

Order of logit processing (each only for the rows that ask for it): logit bias, frequency /
presence / repetition penalties, suppression of end tokens before `min_new_tokens`, grammar
bitmask; then `ops.sample`. Returned log-probabilities are of the processed logits before
temperature, so a constrained token never gets probability from an impossible one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sglang import ops
from sglang.ops.sampling import SamplingTensors
from sglang.runtime.scheduler.req import Req


@dataclass
class SampleResult:
    token_ids: list[int]
    logprobs: torch.Tensor | None
    """`[B, V]` float32 log-probabilities, when some row asked for logprobs."""


def _penalized(reqs: Sequence[Req]) -> bool:
    return any(
        r.params.frequency_penalty or r.params.presence_penalty or r.params.repetition_penalty != 1.0 for r in reqs
    )


def _apply_penalties(logits: torch.Tensor, reqs: Sequence[Req]) -> torch.Tensor:
    vocab = logits.shape[-1]
    counts = torch.zeros_like(logits, dtype=torch.int32)
    seen = torch.zeros_like(logits, dtype=torch.bool)
    for row, req in enumerate(reqs):
        if req.output_ids:
            out = torch.tensor(req.output_ids, dtype=torch.long)
            counts[row] = torch.bincount(out, minlength=vocab)[:vocab].to(torch.int32)
        seen[row, torch.tensor(req.input_ids + req.output_ids, dtype=torch.long)] = True

    def column(name: str) -> torch.Tensor:
        return torch.tensor([getattr(r.params, name) for r in reqs], dtype=logits.dtype, device=logits.device)

    return ops.apply_penalties(
        logits,
        counts.to(logits.device),
        seen.to(logits.device),
        column("frequency_penalty"),
        column("presence_penalty"),
        column("repetition_penalty"),
    )


def is_greedy(req: Req) -> bool:
    return req.params.temperature < 1e-6 or req.params.top_k == 1


def sampling_tensors(reqs: Sequence[Req], vocab: int, device: torch.device) -> SamplingTensors:
    temps, top_ps, top_ks, min_ps = [], [], [], []
    for r in reqs:
        p = r.params
        temps.append(0.0 if is_greedy(r) else p.temperature)
        top_ps.append(p.top_p)
        top_ks.append(vocab if p.top_k < 0 else p.top_k)
        min_ps.append(p.min_p)
    return SamplingTensors(
        temperatures=torch.tensor(temps, device=device),
        top_ps=torch.tensor(top_ps, device=device),
        top_ks=torch.tensor(top_ks, device=device),
        min_ps=torch.tensor(min_ps, device=device),
        generators=[r.generator for r in reqs],
    )


def process_logits(
    reqs: Sequence[Req], logits: torch.Tensor, grammar_bitmasks: torch.Tensor | None = None
) -> torch.Tensor:
    """`logits` `[len(reqs), V]` float32 after bias, penalties, `min_new_tokens` suppression and
    grammar, in that order (modified in place where possible): what every draw and every
    returned log-probability is taken from. `grammar_bitmasks`: one per constrained row, in
    order, instead of each matcher's current one (a verify step's rows lie along its draft)."""
    for row, req in enumerate(reqs):
        if req.logit_bias is not None:
            logits[row] += req.logit_bias.to(logits.device)
        if len(req.output_ids) < req.params.min_new_tokens and req.stop_token_ids:
            logits[row, list(req.stop_token_ids)] = float("-inf")
    if _penalized(reqs):
        logits = _apply_penalties(logits, reqs)
    constrained = [row for row, req in enumerate(reqs) if req.grammar is not None]
    if constrained:
        bitmask = grammar_bitmasks
        if bitmask is None:
            bitmask = torch.stack([reqs[row].grammar.next_token_bitmask() for row in constrained])
        logits[constrained] = ops.apply_token_bitmask(logits[constrained], bitmask.to(logits.device))
    return logits


def wants_logprobs(reqs: Sequence[Req]) -> bool:
    return any(r.logprobs.return_logprob or r.logprobs.return_entropy for r in reqs)


def sample(reqs: Sequence[Req], logits: torch.Tensor) -> SampleResult:
    """`logits` `[len(reqs), V]` float32 (modified in place)."""
    vocab = logits.shape[-1]
    logits = process_logits(reqs, logits)
    logprobs = ops.log_softmax(logits) if wants_logprobs(reqs) else None
    if all(is_greedy(r) for r in reqs):
        # What `ops.sample` does for an all-greedy batch, without building its parameter tensors
        # (a few of the small ops that add up in a batch-1 decode step).
        token_ids = ops.argmax(logits).tolist()
    else:
        token_ids = ops.sample(logits, sampling_tensors(reqs, vocab, logits.device)).tolist()
    return SampleResult(token_ids=token_ids, logprobs=logprobs)
