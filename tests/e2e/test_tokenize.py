"""/v1/tokenize and /v1/detokenize against a real server, in upstream SGLang's shapes: ids are
the server tokenizer's, `messages` tokenize to exactly the prompt a chat completion sends, and
bad input is a 400 (404 for an unknown model) in the OpenAI error shape."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from sglang.ci.suites.e2e.openai_errors import assert_openai_error

TEXT = "The capital of France is Paris."
MESSAGES = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]


def ok(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    return response.json()


def test_tokenize_a_prompt(http: httpx.Client, tokenizer: Any) -> None:
    context = ok(http.get("/v1/models"))["data"][0]["max_model_len"]
    out = ok(http.post("/v1/tokenize", json={"prompt": TEXT}))
    assert out == {"tokens": tokenizer.encode(TEXT), "count": len(out["tokens"]), "max_model_len": context}
    bare = ok(http.post("/tokenize", json={"prompt": TEXT, "add_special_tokens": False, "model": "default"}))
    assert bare["tokens"] == tokenizer.encode(TEXT, add_special_tokens=False)


def test_tokenize_a_batch_and_a_prompt_past_the_context(http: httpx.Client, tokenizer: Any) -> None:
    long_text = "word " * 9000
    out = ok(http.post("/v1/tokenize", json={"prompt": ["a b", TEXT, long_text]}))
    assert out["tokens"][:2] == [tokenizer.encode("a b"), tokenizer.encode(TEXT)]
    assert out["count"] == [len(ids) for ids in out["tokens"]]
    assert out["count"][2] > out["max_model_len"]  # counted, not refused


def test_tokenize_messages_as_the_chat_route_renders_them(http: httpx.Client, tokenizer: Any) -> None:
    out = ok(http.post("/v1/tokenize", json={"messages": MESSAGES}))
    chat = ok(http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1}))
    assert out["count"] == len(out["tokens"]) == chat["usage"]["prompt_tokens"]
    text = tokenizer.decode(out["tokens"])
    assert "Hi there" in text and text.rstrip().endswith("assistant"), text


def test_detokenize(http: httpx.Client, tokenizer: Any) -> None:
    ids = tokenizer.encode(TEXT)
    assert ok(http.post("/v1/detokenize", json={"tokens": ids})) == {"text": TEXT}
    batch = ok(http.post("/detokenize", json={"tokens": [ids, ids[:2], []]}))
    assert batch == {"text": [TEXT, tokenizer.decode(ids[:2]), ""]}
    assert ok(http.post("/v1/detokenize", json={"tokens": []})) == {"text": ""}
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    kept = ok(http.post("/v1/detokenize", json={"tokens": [*ids, eos], "skip_special_tokens": False}))
    assert kept["text"] == TEXT + "<|im_end|>"
    assert ok(http.post("/v1/detokenize", json={"tokens": [*ids, eos]}))["text"] == TEXT


BAD = [
    ("/v1/tokenize", {}, "prompt"),
    ("/v1/tokenize", {"prompt": TEXT, "messages": MESSAGES}, "prompt"),
    ("/v1/tokenize", {"prompt": 5}, "prompt"),
    ("/v1/tokenize", {"prompt": [TEXT, 5]}, "prompt"),
    ("/v1/tokenize", {"prompt": TEXT, "add_special_tokens": "yes"}, "add_special_tokens"),
    ("/v1/tokenize", {"prompt": TEXT, "colour": "red"}, "colour"),
    ("/v1/tokenize", {"messages": []}, "messages"),
    ("/v1/tokenize", {"messages": [{"role": "wizard", "content": "Hi"}]}, "role"),
    ("/v1/detokenize", {}, "tokens"),
    ("/v1/detokenize", {"tokens": "hello"}, "tokens"),
    ("/v1/detokenize", {"tokens": [1.5, 2]}, "tokens"),
    ("/v1/detokenize", {"tokens": [1, [2]]}, "tokens"),
    ("/v1/detokenize", {"tokens": [10**7]}, "tokens"),
    ("/v1/detokenize", {"tokens": [[1], [-1]]}, "tokens"),
    ("/v1/detokenize", {"tokens": [2**64]}, "tokens"),
]


@pytest.mark.parametrize(("path", "body", "param"), BAD)
def test_bad_input_is_400(http: httpx.Client, path: str, body: dict[str, Any], param: str) -> None:
    assert_openai_error(http.post(path, json=body), 400, param)


@pytest.mark.parametrize(("path", "body"), [("/v1/tokenize", {"prompt": "x"}), ("/v1/detokenize", {"tokens": [1]})])
def test_an_unknown_model_is_404(http: httpx.Client, path: str, body: dict[str, Any]) -> None:
    assert_openai_error(http.post(path, json={**body, "model": "gpt-17"}), 404, "model")
