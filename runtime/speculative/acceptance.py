"""Which drafted tokens a verify step accepts, and the one token the target adds after them.

A verify step gives the target's logits at the request's last token and at each draft: row `i`
is the distribution of the token after `draft[:i]`. The rows go through the same processing as a
plain decode step's (`process_logits`: logit bias, and the grammar's bitmask after `draft[:i]`,
which the draft was cut to fit; requests whose other processing depends on the tokens before the
row, such as penalties, are not drafted for), so:

- greedy: draft `i` is accepted while it is row `i`'s argmax; the first row whose argmax differs
  (or the row after the last draft) gives the next token. The output is token for token what
  decoding without drafts gives.
- sampling: drafts are point masses (NGRAM proposes one token, with probability 1), so
  speculative sampling's rule (accept with probability `min(1, p/q)`, else draw from
  `norm(max(p - q, 0))`) is: accept draft `d` with probability `p(d)`, else draw from `p` with `d`
  removed. `p` is the target's distribution after temperature, top-k, top-p and min-p, exactly as
  a plain step draws from, so every output token has the target's distribution.

The returned log-probabilities are those of the processed logits before temperature, row by
row: what a plain decode step returns for the same token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from sglang import ops
from sglang.ops.sampling import filter_probs
from sglang.runtime.scheduler.req import Req
from sglang.runtime.scheduler.sampler import is_greedy, process_logits, sampling_tensors, wants_logprobs


@dataclass
class Verified:
    """`tokens`: the accepted drafts then the target's own token (at least one token);
    `logprobs`: `[len(tokens), V]` rows they were chosen from, when the request asked."""

    tokens: list[int]
    logprobs: torch.Tensor | None

    @property
    def accepted(self) -> int:
        return len(self.tokens) - 1


def verify(
    req: Req, draft: Sequence[int], logits: torch.Tensor, grammar_bitmasks: torch.Tensor | None = None
) -> Verified:
    """`logits` `[len(draft) + 1, V]` float32: the target's rows at the last token and each draft;
    `grammar_bitmasks`: a constrained request's masks along the draft, one a row. `logits` is
    left as it is (it may be a view of the step's inference-mode logits)."""
    rows = len(draft) + 1
    logits = process_logits([req] * rows, logits.clone(), grammar_bitmasks)
    logprobs = ops.log_softmax(logits) if wants_logprobs([req]) else None
    if is_greedy(req):
        targets = ops.argmax(logits).tolist()
        accepted = next((i for i, (d, t) in enumerate(zip(draft, targets)) if d != t), len(draft))
        tokens = [*draft[:accepted], targets[accepted]]
    else:
        tokens = rejection_sample(target_probs(req, logits), draft, req.generator)
    return Verified(tokens, None if logprobs is None else logprobs[: len(tokens)])


def target_probs(req: Req, logits: torch.Tensor) -> torch.Tensor:
    """`[rows, V]` float32 on the host: the distribution a plain step of `req` draws from, per row."""
    params = sampling_tensors([req] * logits.shape[0], logits.shape[-1], logits.device)
    probs = (logits.float() / params.temperatures.clamp(min=1e-6)[:, None]).softmax(dim=-1)
    probs = filter_probs(probs, params.top_ks, params.top_ps, params.min_ps)
    return (probs / probs.sum(dim=-1, keepdim=True)).cpu()


def rejection_sample(probs: torch.Tensor, draft: Sequence[int], generator: torch.Generator | None) -> list[int]:
    """Speculative sampling of point-mass drafts against `probs` `[len(draft) + 1, V]`."""
    tokens: list[int] = []
    for row, token in enumerate(draft):
        p = probs[row]
        if float(torch.rand((), generator=generator)) < float(p[token]):
            tokens.append(token)
            continue
        residual = p.clone()
        residual[token] = 0.0  # p(token) < 1 here, so something else has mass
        return [*tokens, int(torch.multinomial(residual, 1, generator=generator))]
    return [*tokens, int(torch.multinomial(probs[len(draft)], 1, generator=generator))]
