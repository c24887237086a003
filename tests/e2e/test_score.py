"""/v1/score on a real server over the embedded model: its scores are the model's next-token
probabilities after `query + item` (the same numbers /generate's `token_ids_logprob` gives), text
and token-id inputs agree, `apply_softmax` normalizes over the labels, and bad requests are 400s
in the OpenAI error shape; /v1/rerank and /classify (cross-encoder and classifier routes) are
refused with the reason."""

from __future__ import annotations

import math
from typing import Any

import httpx
import pytest

from sglang.ci.suites.e2e.openai_errors import assert_openai_error

QUERY = "The capital of France is"
ITEMS = [" Paris", " a city"]


def score(http: httpx.Client, **body: Any) -> dict[str, Any]:
    response = http.post("/v1/score", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def flat(rows: list[list[float]]) -> list[float]:
    return [x for row in rows for x in row]


def label_ids(http: httpx.Client) -> list[int]:
    """Two tokens that can follow the items: a period and a comma."""
    return [http.post("/v1/tokenize", json={"prompt": p}).json()["tokens"][-1] for p in (".", ",")]


def test_scores_are_next_token_probabilities(http: httpx.Client) -> None:
    labels = label_ids(http)
    answer = score(http, query=QUERY, items=ITEMS, label_token_ids=labels, return_token_logprobs=True)
    assert answer["object"] == "scoring" and answer["usage"]["completion_tokens"] == 0
    assert len(answer["scores"]) == len(ITEMS) and all(len(row) == 2 for row in answer["scores"])
    for item, row, logprobs in zip(ITEMS, answer["scores"], answer["token_logprobs"], strict=True):
        generated = http.post(
            "/generate",
            json={
                "text": QUERY + item,
                "sampling_params": {"max_new_tokens": 1, "temperature": 0},
                "return_logprob": True,
                "token_ids_logprob": labels,
            },
        ).json()
        expected = {token: logprob for logprob, token, *_ in generated["meta_info"]["output_token_ids_logprobs"][0]}
        # One batch against one request: the same prefill up to the kernels' row-count rounding.
        assert logprobs == pytest.approx([expected[t] for t in labels], abs=2e-3)
        assert row == pytest.approx([math.exp(x) for x in logprobs], rel=1e-6)
        assert 0 < sum(row) <= 1


def test_token_ids_softmax_and_item_first(http: httpx.Client) -> None:
    labels = label_ids(http)
    by_text = score(http, query=QUERY, items=ITEMS, label_token_ids=labels, apply_softmax=True)
    tokenize = lambda text: http.post("/v1/tokenize", json={"prompt": text}).json()["tokens"]
    by_ids = score(
        http, query=tokenize(QUERY), items=[tokenize(i) for i in ITEMS], label_token_ids=labels, apply_softmax=True
    )
    assert flat(by_ids["scores"]) == pytest.approx(flat(by_text["scores"]), abs=1e-4)
    for row in by_text["scores"]:
        assert sum(row) == pytest.approx(1.0)
    first = score(http, query=QUERY, items=ITEMS, label_token_ids=labels, apply_softmax=True, item_first=True)
    assert flat(first["scores"]) != pytest.approx(flat(by_text["scores"]), abs=1e-3)  # other sequences
    per_item = score(http, query=QUERY, items=ITEMS, label_token_ids=[labels, labels[:1]])
    assert [len(row) for row in per_item["scores"]] == [2, 1]


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"query": QUERY, "label_token_ids": [13]}, "items"),
        ({"query": QUERY, "items": ITEMS}, "label_token_ids"),
        ({"query": QUERY, "items": ITEMS, "label_token_ids": [10**9]}, "label_token_ids"),
        ({"query": QUERY, "items": ITEMS, "label_token_ids": [[13]]}, "label_token_ids"),
        ({"query": QUERY, "items": ITEMS, "label_token_ids": [13], "return_pooled_hidden_states": True}, None),
        ({"query": QUERY, "items": ITEMS, "label_token_ids": [13], "model": "another-model"}, "model"),
    ],
)
def test_bad_requests(http: httpx.Client, body: dict[str, Any], param: str | None) -> None:
    response = http.post("/v1/score", json=body)
    assert_openai_error(response, 404 if param == "model" else 400, param)


@pytest.mark.parametrize(("method", "path"), [("POST", "/v1/rerank"), ("PUT", "/v1/rerank"), ("POST", "/classify")])
def test_rerank_and_classify_refused_with_the_reason(http: httpx.Client, method: str, path: str) -> None:
    """Upstream serves these for `--is-embedding` models only: a 400 saying so, not a 404."""
    response = http.request(method, path, json={"query": QUERY, "documents": ITEMS, "text": QUERY})
    error = assert_openai_error(response, 400)
    assert "--is-embedding" in error["message"]
