"""Upstream SGLang's scoring API, POST /v1/score, for a generative model: for each item, how likely
each label token is to come next after `query + item` (`item + query` with `item_first`).

Each sequence is prefilled once and one token sampled (greedy), keeping the logprobs of the
labels at that first position (`token_ids_logprob`): the next-token distribution after the whole
sequence, what upstream reads at its last prompt position. Texts are joined as strings, token ids
as lists, as upstream does. Scores: `exp(logprob)` of each label, the model's own probabilities;
with `apply_softmax`, a softmax over the labels' logprobs at `temperature`.

Upstream's fields for features this runtime lacks (embedding overrides, pooled hidden states,
setwise readout at `score_extraction_token`) are accepted at their defaults and refused otherwise
with a 400 naming them.
"""

from __future__ import annotations

import math
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field, StrictBool, StrictInt, StrictStr, model_validator

from sglang.runtime.requests.generate_input import GenerateInput
from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.protocol import UnicodeBody
from sglang.runtime.server.openai.responses import json_response, run_to_end
from sglang.runtime.server.state import ServerState, server_state

router = APIRouter()

TokenIds = list[StrictInt]


class ScoringRequest(UnicodeBody):
    model: str | None = None
    query: StrictStr | TokenIds | None = None
    items: StrictStr | list[StrictStr] | list[TokenIds] | None = None
    label_token_ids: TokenIds | list[TokenIds] | None = None
    """Candidate next tokens: one list for every item, or one list per item."""
    apply_softmax: StrictBool = False
    temperature: float = Field(1.0, gt=0, allow_inf_nan=False)
    return_token_logprobs: StrictBool = False
    item_first: StrictBool = False
    # Upstream's, for features this runtime lacks: their defaults only.
    embed_override_token_id: StrictInt | None = None
    query_embed_overrides: list[list[float]] | None = None
    item_embed_overrides: list[list[list[float]] | None] | None = None
    return_pooled_hidden_states: StrictBool = False
    score_extraction_token: StrictStr | None = None

    @model_validator(mode="after")
    def _supported(self) -> ScoringRequest:
        for name in ("embed_override_token_id", "query_embed_overrides", "item_embed_overrides"):
            if getattr(self, name) is not None:
                raise ValueError(f"{name} is not supported by this server (no embedding overrides)")
        if self.return_pooled_hidden_states:
            raise ValueError("return_pooled_hidden_states needs a classification model; this one is generative")
        if self.score_extraction_token is not None:
            raise ValueError("score_extraction_token (setwise scoring) is not supported by this server")
        if self.temperature != 1.0 and not self.apply_softmax:
            raise ValueError("temperature requires apply_softmax=True")
        return self


def _sequences(body: ScoringRequest) -> list[str] | list[list[int]]:
    items: Any = [body.items] if isinstance(body.items, str) else body.items
    texts = bool(items) and isinstance(items[0], str)
    query: Any = body.query if body.query is not None else ("" if texts else [])
    if isinstance(query, str) != texts:
        raise ApiError(400, "query and items must both be text or both be token ids", "query")
    return [item + query if body.item_first else query + item for item in items]


def _labels(body: ScoringRequest, count: int, vocab_size: int) -> list[list[int]]:
    labels: Any = body.label_token_ids
    if not labels:
        raise ApiError(400, "label_token_ids must be a nonempty list", "label_token_ids")
    per_item = labels if isinstance(labels[0], list) else [labels] * count
    if len(per_item) != count:
        raise ApiError(400, "label_token_ids must have one list per item", "label_token_ids")
    for candidates in per_item:
        if not candidates or len(set(candidates)) != len(candidates):
            raise ApiError(400, "each item needs a nonempty list of distinct label tokens", "label_token_ids")
        if any(not 0 <= token < vocab_size for token in candidates):
            raise ApiError(400, f"label_token_ids must be token ids below {vocab_size}", "label_token_ids")
    return per_item


def scores(logprobs: list[float], apply_softmax: bool, temperature: float) -> list[float]:
    """Upstream's conversion: probabilities, or a softmax over the labels (centred first, so a
    small temperature does not overflow)."""
    if not apply_softmax:
        return [math.exp(x) for x in logprobs]
    top = max(logprobs)
    weights = [math.exp((x - top) / temperature) for x in logprobs]
    total = sum(weights)
    return [w / total for w in weights]


async def score(body: ScoringRequest, state: ServerState) -> dict[str, Any]:
    if body.items is None:
        raise ApiError(400, "items must be provided", "items")
    sequences = _sequences(body)
    if not sequences:
        return {"scores": [], "model": body.model or state.model_name, "object": "scoring"}
    labels = _labels(body, len(sequences), state.info.vocab_size)
    texts = isinstance(sequences[0], str)
    obj = GenerateInput(
        text=sequences if texts else None,  # type: ignore[arg-type]
        input_ids=None if texts else sequences,  # type: ignore[arg-type]
        sampling_params={"max_new_tokens": 1, "temperature": 0.0},
        return_logprob=True,
        token_ids_logprob=labels,
    )
    outputs = await run_to_end(state.manager, obj, {"text": "items", "input_ids": "items"})
    rows, token_logprobs, prompt_tokens = [], [], 0
    for output, candidates in zip(outputs, labels, strict=True):
        meta = output["meta_info"]
        by_token = {token: logprob for logprob, token, *_ in meta["output_token_ids_logprobs"][0]}
        logprobs = [by_token[token] for token in candidates]
        rows.append(scores(logprobs, body.apply_softmax, body.temperature))
        token_logprobs.append(logprobs)
        prompt_tokens += meta["prompt_tokens"]
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 0, "total_tokens": prompt_tokens}
    answer: dict[str, Any] = {"scores": rows, "model": body.model or state.model_name, "usage": usage}
    if body.return_token_logprobs:
        answer["token_logprobs"] = token_logprobs
    return answer | {"object": "scoring"}


@router.post("/v1/score")
async def create_score(body: ScoringRequest, request: Request) -> Response:
    state = server_state(request)
    state.check_model(body.model)
    return json_response(await score(body, state))
