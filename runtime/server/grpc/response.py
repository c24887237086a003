"""The tokenizer manager's output dicts as smg's `GenerateResponse` messages.

A stream sends each update's new tokens as a `chunk`; the last update goes out both as a chunk
and as the `complete` message carrying the finish reason, as upstream's servicer does. A
non-streaming request gets one `complete` with every output id. `index` numbers the samples of
an `n > 1` request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from smg_grpc_proto import sglang_scheduler_pb2 as pb


@dataclass
class StreamCursor:
    """How much of one sample's cumulative output has been sent already."""

    tokens: int = 0
    output_logprobs: int = 0
    input_logprobs_sent: bool = False


def _top(rows: list[Any] | None, start: int) -> list[pb.TopLogProbs]:
    return [
        pb.TopLogProbs(values=[lp for lp, _ in row or ()], token_ids=[t for _, t in row or ()])
        for row in (rows or [])[start:]
    ]


def _output_logprobs(meta: dict[str, Any], start: int) -> pb.OutputLogProbs | None:
    pairs = meta.get("output_token_logprobs")
    if pairs is None:
        return None
    return pb.OutputLogProbs(
        token_logprobs=[lp for lp, _ in pairs[start:]],
        token_ids=[t for _, t in pairs[start:]],
        top_logprobs=_top(meta.get("output_top_logprobs"), start),
        token_ids_logprobs=_top(meta.get("output_token_ids_logprobs"), start),
    )


def _input_logprobs(meta: dict[str, Any]) -> pb.InputLogProbs | None:
    pairs = meta.get("input_token_logprobs")
    if pairs is None:
        return None
    return pb.InputLogProbs(
        token_logprobs=[pb.InputTokenLogProb() if lp is None else pb.InputTokenLogProb(value=lp) for lp, _ in pairs],
        token_ids=[t for _, t in pairs],
        top_logprobs=_top(meta.get("input_top_logprobs"), 0),
    )


def _counts(meta: dict[str, Any]) -> dict[str, int]:
    return {
        "prompt_tokens": meta.get("prompt_tokens", 0),
        "completion_tokens": meta.get("completion_tokens", 0),
        "cached_tokens": meta.get("cached_tokens", 0),
    }


def chunk(rid: str, output: dict[str, Any], cursor: StreamCursor, index: int = 0) -> pb.GenerateResponse:
    """The tokens (and logprobs) of `output` not sent yet; advances `cursor`."""
    meta = output["meta_info"]
    ids = output["output_ids"]
    message = pb.GenerateStreamChunk(token_ids=ids[cursor.tokens :], index=index, **_counts(meta))
    if (logprobs := _output_logprobs(meta, cursor.output_logprobs)) is not None:
        message.output_logprobs.CopyFrom(logprobs)
        cursor.output_logprobs = meta["output_token_logprobs_length"]
    if not cursor.input_logprobs_sent and (inputs := _input_logprobs(meta)) is not None:
        message.input_logprobs.CopyFrom(inputs)
        cursor.input_logprobs_sent = True
    cursor.tokens = len(ids)
    return pb.GenerateResponse(request_id=rid, chunk=message)


def complete(
    rid: str, output: dict[str, Any], index: int = 0, output_ids: list[int] | None = None
) -> pb.GenerateResponse:
    """The final message of a sample: its finish reason, matched stop and token counts.
    `output_ids` defaults to every output id (a non-streaming answer)."""
    meta = output["meta_info"]
    finish = meta["finish_reason"] or {"type": "stop"}
    message = pb.GenerateComplete(
        output_ids=output["output_ids"] if output_ids is None else output_ids,
        finish_reason=finish["type"],
        index=index,
        **_counts(meta),
    )
    matched = finish.get("matched")
    if isinstance(matched, int):
        message.matched_token_id = matched
    elif isinstance(matched, str):
        message.matched_stop_str = matched
    if (logprobs := _output_logprobs(meta, 0)) is not None:
        message.output_logprobs.CopyFrom(logprobs)
    if (inputs := _input_logprobs(meta)) is not None:
        message.input_logprobs.CopyFrom(inputs)
    if "spec_verify_ct" in meta:
        message.spec_accepted_tokens = meta["spec_num_correct_drafts"]
        message.spec_draft_tokens = meta["spec_num_proposed_drafts"]
    return pb.GenerateResponse(request_id=rid, complete=message)
