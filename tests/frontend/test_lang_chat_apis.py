"""`sgl.Anthropic` and `sgl.LiteLLM` without a server: the request fields a program's parameters
become, the parameters each API cannot carry (refused by name, never dropped), and the turn a
`gen` must open. Both run programs against our server in the program suite (`anthropic` column)
and in tests/clients/test_api_clients.py (LiteLLM, in its own venv).
"""

from __future__ import annotations

import sys

import pytest

import sglang as sgl
from sglang.frontend.backend.anthropic import anthropic_kwargs
from sglang.frontend.backend.base import Prompt
from sglang.frontend.backend.chat_api import chat_messages
from sglang.frontend.backend.litellm import litellm_kwargs
from sglang.frontend.sampling_params import SamplingParams

MESSAGES = ({"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"})


def test_anthropic_fields() -> None:
    params = SamplingParams(max_new_tokens=7, temperature=0.0, top_k=5, stop=["END"])
    assert anthropic_kwargs(params) == {"max_tokens": 7, "temperature": 0.0, "top_k": 5, "stop_sequences": ["END"]}
    for refused in (SamplingParams(min_new_tokens=3), SamplingParams(n=2), SamplingParams(frequency_penalty=0.5)):
        with pytest.raises(sgl.BackendCapabilityError, match="Anthropic Messages API cannot carry"):
            anthropic_kwargs(refused)
    with pytest.raises(sgl.BackendCapabilityError, match="regex"):
        anthropic_kwargs(SamplingParams(dtype=int))


def test_litellm_fields() -> None:
    params = SamplingParams(max_new_tokens=7, presence_penalty=0.5, top_p=0.9)
    assert litellm_kwargs(params) == {"max_tokens": 7, "temperature": 1.0, "top_p": 0.9, "presence_penalty": 0.5}
    with pytest.raises(sgl.BackendCapabilityError, match="min_new_tokens"):
        litellm_kwargs(SamplingParams(min_new_tokens=2))


def test_a_gen_must_open_the_assistant_turn() -> None:
    opened = Prompt("s", "text", MESSAGES, role="assistant")
    assert chat_messages(opened, "X") == list(MESSAGES) and chat_messages(opened, "X")[0] is not MESSAGES[0]
    for prompt in (
        Prompt("s", "raw text, no roles"),
        Prompt("s", "text", MESSAGES, role="user"),
        Prompt("s", "text", MESSAGES, role="assistant", role_text="The answer is"),
    ):
        with pytest.raises(sgl.BackendCapabilityError, match="chat API"):
            chat_messages(prompt, "X")


def test_litellm_needs_litellm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "litellm", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install litellm"):
        sgl.LiteLLM("openai/default")


def test_anthropic_sends_the_key_as_anthropic_does() -> None:
    backend = sgl.Anthropic("default", base_url="http://127.0.0.1:9/v1", api_key="sk-x")
    headers = backend.http._client.headers
    assert headers["x-api-key"] == "sk-x" and headers["anthropic-version"] and "authorization" not in headers
    assert str(backend.http._client.base_url).rstrip("/") == "http://127.0.0.1:9/v1"
    backend.shutdown()
