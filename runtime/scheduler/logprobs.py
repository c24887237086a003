"""What the scheduler reports of a request: its log-probabilities and its `RequestMeta`."""

from __future__ import annotations

import time

import torch

from sglang.runtime.processes.messages import RequestMeta
from sglang.runtime.scheduler.req import Req


def _top(row: torch.Tensor, k: int) -> list[tuple[float, int]]:
    values, ids = row.topk(k)
    return list(zip(values.tolist(), ids.tolist()))


def _of_ids(row: torch.Tensor, token_ids: tuple[int, ...]) -> list[tuple[float, int]]:
    return [(float(row[t]), t) for t in token_ids]


def record_input(req: Req, positions: list[int], logprobs: torch.Tensor) -> None:
    """`logprobs[i]` (log-softmax at position `positions[i]`) scores prompt token `positions[i] + 1`."""
    log, want = req.log, req.logprobs
    if want.logprob_start_len == 0 and not log.input_token and positions and positions[0] == 0:
        # The first prompt token has no context to be scored from.
        log.input_token.append((None, req.input_ids[0]))
        log.input_top.append(None)
        log.input_ids_logprob.append(None)
    for p, row in zip(positions, logprobs):
        token = req.input_ids[p + 1]
        log.input_token.append((float(row[token]), token))
        if want.top_logprobs_num:
            log.input_top.append(_top(row, want.top_logprobs_num))
        if want.token_ids_logprob:
            log.input_ids_logprob.append(_of_ids(row, want.token_ids_logprob))


def record_output(req: Req, token: int, row: torch.Tensor) -> None:
    """`row`: the log-softmax the token was sampled from (after penalties, bias and grammar)."""
    log, want = req.log, req.logprobs
    if want.return_entropy:
        finite = row.isfinite()  # masked tokens (-inf) have probability 0 and add nothing
        log.output_entropy.append(float(-(row[finite].exp() * row[finite]).sum()))
    if not want.return_logprob:
        return
    log.output_token.append((float(row[token]), token))
    if want.top_logprobs_num:
        log.output_top.append(_top(row, want.top_logprobs_num))
    if want.token_ids_logprob:
        log.output_ids_logprob.append(_of_ids(row, want.token_ids_logprob))


def request_meta(req: Req) -> RequestMeta:
    """The request's counts and latencies now, with the log-probabilities recorded since its
    previous update. Arrival is stamped with the system-wide monotonic clock in the tokenizer
    manager's process, so the differences are meaningful here."""
    now = time.monotonic()
    first = req.first_token_time
    outputs = len(req.output_ids)
    return RequestMeta(
        prompt_tokens=len(req.input_ids),
        completion_tokens=outputs,
        cached_tokens=req.cached_tokens,
        cached_tokens_details=req.cached_tokens_details,
        e2e_latency=now - req.arrival_time,
        ttft=None if first is None else first - req.arrival_time,
        itl=(now - first) / (outputs - 1) if first is not None and outputs > 1 else None,
        logprobs=req.log.take_new(),
        spec_verify_ct=req.spec_verify_ct,
        spec_draft_tokens=req.spec_draft_tokens,
        spec_accepted_tokens=req.spec_accepted_tokens,
        queue_time=None if req.admit_time is None else req.admit_time - req.arrival_time,
        retractions=req.retractions,
    )
