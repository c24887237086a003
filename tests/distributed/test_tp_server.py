"""The OpenAI API against a real `sglang serve --tp-size 2` (two rank processes over gloo) on a
loopback port: models, a greedy chat completion naming Paris,
a streamed completion, and `/get_server_info` reporting the tensor-parallel size."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from sglang.ci.servers import REQUEST_TIMEOUT_S, RunningServer, launch, serve_spec

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    spec = serve_spec("--tp-size", "2", "--max-total-tokens", "2048", "--dtype", "float32")
    server = launch(spec, tmp_path_factory.mktemp("tp-server"))
    try:
        yield server
    finally:
        assert server.stop() == 0, server.log_tail()


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", timeout=REQUEST_TIMEOUT_S, max_retries=0) as c:
        yield c


def test_server_reports_tp_size(server: RunningServer) -> None:
    assert server.server_info()["tp_size"] == 2


def test_chat_completion(client: openai.OpenAI) -> None:
    model = client.models.list().data[0].id
    out = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=16,
        temperature=0,
    )
    assert out.choices[0].message.role == "assistant"
    assert "Paris" in out.choices[0].message.content
    assert out.usage.completion_tokens <= 16


def test_streamed_completion(client: openai.OpenAI) -> None:
    model = client.models.list().data[0].id
    chunks = list(
        client.completions.create(
            model=model,
            prompt="The capital of France is",
            max_tokens=6,
            temperature=0,
            stream=True,
            extra_body={"ignore_eos": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text and chunks[-1].choices[0].finish_reason == "length"
