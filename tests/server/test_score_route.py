"""/v1/score's pure parts without a server: the request's refusals, how query and items join, the
label lists, and upstream's conversion of logprobs to scores. The route over a real server is in
tests/e2e/test_score.py."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from sglang.runtime.server.errors import ApiError
from sglang.runtime.server.openai.score import ScoringRequest, _labels, _sequences, scores


def test_scores_are_probabilities_or_a_softmax_over_the_labels() -> None:
    logprobs = [math.log(0.5), math.log(0.1), -math.inf]
    assert scores(logprobs, apply_softmax=False, temperature=1.0) == pytest.approx([0.5, 0.1, 0.0])
    soft = scores(logprobs, apply_softmax=True, temperature=1.0)
    assert sum(soft) == pytest.approx(1.0) and soft == pytest.approx([5 / 6, 1 / 6, 0.0])
    sharper = scores(logprobs, apply_softmax=True, temperature=0.5)
    assert sharper[0] > soft[0] and sum(sharper) == pytest.approx(1.0)
    assert scores([-1e4, -1e4 - 1], apply_softmax=True, temperature=1e-3) == pytest.approx([1.0, 0.0])  # no overflow


def test_query_and_items_join_as_upstream_does() -> None:
    body = ScoringRequest(query="Q:", items=["a", "b"], label_token_ids=[1])
    assert _sequences(body) == ["Q:a", "Q:b"]
    assert _sequences(body.model_copy(update={"item_first": True})) == ["aQ:", "bQ:"]
    assert _sequences(ScoringRequest(query=[1, 2], items=[[3], [4, 5]], label_token_ids=[1])) == [
        [1, 2, 3],
        [1, 2, 4, 5],
    ]
    assert _sequences(ScoringRequest(items="alone", label_token_ids=[1])) == ["alone"]
    with pytest.raises(ApiError, match="both be text or both be token ids"):
        _sequences(ScoringRequest(query="Q", items=[[3]], label_token_ids=[1]))


def test_label_lists() -> None:
    assert _labels(ScoringRequest(items=["a", "b"], label_token_ids=[7, 9]), 2, 100) == [[7, 9], [7, 9]]
    assert _labels(ScoringRequest(items=["a", "b"], label_token_ids=[[7], [9, 8]]), 2, 100) == [[7], [9, 8]]
    for labels, words in (([], "nonempty"), ([[7]], "one list per item"), ([7, 7], "distinct"), ([100], "below 100")):
        with pytest.raises(ApiError, match=words):
            _labels(ScoringRequest(items=["a", "b"], label_token_ids=labels), 2, 100)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"embed_override_token_id": 5}, "embed_override_token_id is not supported"),
        ({"return_pooled_hidden_states": True}, "classification model"),
        ({"score_extraction_token": "<x>"}, "setwise"),
        ({"temperature": 0.5}, "requires apply_softmax"),
        ({"temperature": 0}, "greater than 0"),
        ({"items": [1, 2]}, "items"),
        ({"unknown": 1}, "Extra inputs"),
    ],
)
def test_refusals(fields: dict, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        ScoringRequest.model_validate({"items": ["a"], "label_token_ids": [1], **fields})
