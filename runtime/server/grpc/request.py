"""A `GenerateRequest` of smg's proto as the `GenerateInput` every other route builds.

proto3 gives every scalar a zero value, so a field the caller left out reads as 0, "" or False.
The conversion follows upstream SGLang's servicer: fields declared `optional` (`max_new_tokens`,
`stream_interval`) and the constraint `oneof` count only when present (`HasField`); a zero
`top_p`, `top_k`, `repetition_penalty` or `n` cannot be a wanted value (each is out of range or
meaningless there) and means the default; every other field is taken as sent (`temperature` 0
is greedy, as upstream, and smg always sends it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf.json_format import MessageToDict
from smg_grpc_proto import sglang_scheduler_pb2 as pb

from sglang.runtime.requests.generate_input import GenerateInput, InvalidRequestError

TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace-context metadata keys passed on with the request."""

_CONSTRAINTS = {
    "regex": "regex",
    "json_schema": "json_schema",
    "ebnf_grammar": "ebnf",
    "structural_tag": "structural_tag",
}
"""The proto's constraint `oneof` member to our sampling field."""


def trace_context(metadata: Iterable[tuple[str, Any]] | None) -> dict[str, str] | None:
    """The caller's `traceparent`/`tracestate` metadata, or None when it sent neither."""
    found = {key: value for key, value in metadata or () if key in TRACE_HEADERS and isinstance(value, str)}
    return found or None


def sampling_params(params: pb.SamplingParams) -> dict[str, Any]:
    """The `sampling_params` dict of `GenerateInput` for proto `params` (see the module doc)."""
    out: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p or 1.0,
        "top_k": params.top_k or -1,
        "min_p": params.min_p,
        "frequency_penalty": params.frequency_penalty,
        "presence_penalty": params.presence_penalty,
        "repetition_penalty": params.repetition_penalty or 1.0,
        "max_new_tokens": params.max_new_tokens if params.HasField("max_new_tokens") else None,
        "min_new_tokens": params.min_new_tokens,
        "skip_special_tokens": params.skip_special_tokens,
        "spaces_between_special_tokens": params.spaces_between_special_tokens,
        "ignore_eos": params.ignore_eos,
        "no_stop_trim": params.no_stop_trim,
        "n": params.n or 1,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if params.stop_token_ids:
        out["stop_token_ids"] = list(params.stop_token_ids)
    if params.HasField("stream_interval"):
        out["stream_interval"] = params.stream_interval
    if params.logit_bias:
        out["logit_bias"] = dict(params.logit_bias)
    if params.HasField("custom_params"):
        out["custom_params"] = MessageToDict(params.custom_params)
    constraint = params.WhichOneof("constraint")
    if constraint is not None:
        out[_CONSTRAINTS[constraint]] = getattr(params, constraint)
    return out


def generate_input(request: pb.GenerateRequest, trace: dict[str, str] | None) -> GenerateInput:
    """The request as our `GenerateInput`; InvalidRequestError for what this server cannot serve."""
    if not request.HasField("tokenized") or not request.tokenized.input_ids:
        raise InvalidRequestError("give the prompt's token ids in `tokenized.input_ids`", "tokenized")
    if request.HasField("mm_inputs") and request.mm_inputs.ByteSize():
        raise InvalidRequestError("this model does not accept images (it has no vision encoder)", "mm_inputs")
    if request.input_embeds:
        raise InvalidRequestError("input_embeds are not supported", "input_embeds")
    if request.HasField("disaggregated_params") and request.disaggregated_params.bootstrap_host:
        raise InvalidRequestError("this worker serves no prefill-decode disaggregation", "disaggregated_params")
    if request.return_hidden_states:
        raise InvalidRequestError("return_hidden_states is not supported", "return_hidden_states")
    return GenerateInput(
        input_ids=list(request.tokenized.input_ids),
        sampling_params=sampling_params(request.sampling_params),
        rid=request.request_id or None,
        return_logprob=request.return_logprob,
        # proto3's 0 would ask for every prompt token's logprob; only a logprob request means it.
        logprob_start_len=request.logprob_start_len if request.return_logprob else -1,
        top_logprobs_num=request.top_logprobs_num,
        token_ids_logprob=list(request.token_ids_logprob) or None,
        stream=request.stream,
        log_metrics=True,
        lora_path=request.lora_id or None,
        trace_context=trace,
    )
