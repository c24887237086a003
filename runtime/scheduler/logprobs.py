"""A request's results as SGLang reports them: log-probabilities and `meta_info`."""

from __future__ import annotations

import time

import torch

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


def latencies(req: Req) -> dict[str, float]:
    """Seconds from arrival to the first token (`ttft`), to now (`e2e_latency`), and the mean
    gap between output tokens (`itl`). Arrival is stamped with the system-wide monotonic clock
    in the tokenizer manager's process, so the difference is meaningful here."""
    now = time.monotonic()
    out: dict[str, float] = {"e2e_latency": now - req.arrival_time}
    if req.first_token_time is not None:
        out["ttft"] = req.first_token_time - req.arrival_time
        if len(req.output_ids) > 1:
            out["itl"] = (now - req.first_token_time) / (len(req.output_ids) - 1)
    return out


def meta_info(req: Req) -> dict:
    """SGLang's `meta_info` for a request; logprob fields only when asked for."""
    meta = {
        "id": req.rid,
        "prompt_tokens": len(req.input_ids),
        "completion_tokens": len(req.output_ids),
        "cached_tokens": req.cached_tokens,
        "finish_reason": req.finish_reason,
        **latencies(req),
    }
    if req.logprobs.return_entropy:
        meta["output_token_entropy"] = req.log.output_entropy
    if req.logprobs.return_logprob:
        log = req.log
        scored = [lp for lp, _ in log.input_token if lp is not None]
        meta.update(
            input_token_logprobs=log.input_token,
            output_token_logprobs=log.output_token,
            # What upstream's streaming clients read to find the new tokens of an update.
            output_token_logprobs_length=len(log.output_token),
            input_top_logprobs=log.input_top,
            output_top_logprobs=log.output_top,
            input_token_ids_logprobs=log.input_ids_logprob,
            output_token_ids_logprobs=log.output_ids_logprob,
            normalized_prompt_logprob=sum(scored) / len(scored) if scored else None,
        )
    return meta
