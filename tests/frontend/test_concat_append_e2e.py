"""`join("concate_and_append")`: the text is always the forks' text in fork order; on our runtime
the branches' KV is reused for it (parallel encoding), elsewhere the text alone is joined.

The fast tests check what the interpreter asks of a backend and how RuntimeEndpoint talks to a
server with and without `/concat_and_append`. The slow ones (`-m slow`: they load the embedded
model) run a fork/join program against `sglang serve` and an in-process Engine and check, through
the next generation's `cached_tokens`, that the concatenated KV was reused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sglang as sgl
from sglang.frontend.backend.base import Prompt

from .fake_servers import FakeOpenAIServer, FakeSGLangServer
from .scripted_backend import ScriptedBackend


class RecordingBackend(ScriptedBackend):
    def __init__(self, accept: bool) -> None:
        super().__init__(lambda prompt, params: f"<{prompt.text[-1]}>")
        self.accept = accept
        self.joins: list[tuple[str, list[str]]] = []

    def concatenate_and_append(self, prompt: Prompt, branches: list[str]) -> bool:
        self.joins.append((prompt.text, branches))
        return self.accept


@sgl.function
def two_tips(s, between: str = ""):
    s += "Tips:\n"
    forks = s.fork(2)
    forks += lambda i: f"{i + 1}." + sgl.gen("tip", max_tokens=4) + "\n"
    s += between
    forks.join("concate_and_append")
    s += "So" + sgl.gen("end", max_tokens=4)


@pytest.mark.parametrize("accept", [True, False])
def test_the_backend_gets_the_fork_prefix_and_the_branches_and_the_text_is_joined_either_way(accept):
    backend = RecordingBackend(accept)
    state = two_tips.run(backend=backend)
    assert state.text() == "Tips:\n1.<.>\n2.<.>\nSo<o>"
    assert backend.joins == [("Tips:\n", ["1.<.>\n", "2.<.>\n"])]


def test_a_trunk_that_moved_on_after_the_fork_joins_text_only():
    backend = RecordingBackend(True)
    state = two_tips.run(between="(later)", backend=backend)
    assert state.text() == "Tips:\n(later)1.<.>\n2.<.>\nSo<o>"
    assert backend.joins == []  # the branches' KV continues "Tips:\n", not the trunk's text


def test_runtime_endpoint_without_the_route_falls_back_to_text_and_asks_once():
    with FakeSGLangServer(reply="ab") as server:
        backend = sgl.RuntimeEndpoint(server.url)
        for _ in range(2):
            assert two_tips.run(backend=backend).text() == "Tips:\n1.ab\n2.ab\nSoab"
        assert len(server.posts("/concat_and_append")) == 1  # a 404 is remembered


class ConcatServer(FakeSGLangServer):
    def __init__(self, answer: dict[str, Any]) -> None:
        super().__init__(reply="ab")
        self.answer = answer

    def handle(self, handler: Any, path: str, body: Any) -> None:
        if path == "/concat_and_append":
            handler._reply(200, self.answer)
        else:
            super().handle(handler, path, body)


@pytest.mark.parametrize("answer", [{"ok": True, "cached_tokens": 12}, {"ok": False, "reason": "evicted"}])
def test_runtime_endpoint_posts_prefix_and_branches(answer):
    with ConcatServer(answer) as server:
        backend = sgl.RuntimeEndpoint(server.url)
        for _ in range(2):
            assert two_tips.run(backend=backend).text() == "Tips:\n1.ab\n2.ab\nSoab"
        assert server.posts("/concat_and_append") == [{"prefix": "Tips:\n", "branches": ["1.ab\n", "2.ab\n"]}] * 2
        assert backend.concatenate_and_append(Prompt("s", "Tips:\n"), ["x"]) is answer["ok"]


def test_openai_backend_joins_text():
    with FakeOpenAIServer(reply="ab") as server:
        backend = sgl.OpenAI("my-base", base_url=server.url + "/v1", is_chat_model=False)
        assert two_tips.run(backend=backend).text() == "Tips:\n1.ab\n2.ab\nSoab"
        assert backend.concatenate_and_append(Prompt("s", "Tips:\n"), ["x"]) is False


# -- end to end on the embedded model (slow) -----------------------------------------------------


@sgl.function
def health_tips(s):
    s += "Here are two short tips for staying healthy.\n"
    forks = s.fork(2)
    forks += lambda i: f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=10, temperature=0) + "\n"
    forks.join("concate_and_append")
    s += "In summary," + sgl.gen("summary", max_tokens=6, temperature=0)


def _joined_text(state: Any) -> str:
    text = state.text()
    return text[: text.rindex("In summary,")]


def _check_reuse(backend: Any, encode: Any) -> None:
    """With parallel encoding the summary's prompt reuses the whole joined text (the boundary
    token aside); joining text only, it reuses the trunk and the first branch, not the second."""
    backend.flush_cache()
    state = health_tips.run(backend=backend)
    joined = _joined_text(state)
    trunk_and_first = joined[: joined.index("Tip 2:")]
    reused = state.get_meta_info("summary")["cached_tokens"]
    assert reused >= len(encode(joined)) - 1 > len(encode(trunk_and_first))

    backend.flush_cache()
    backend._concat_supported = False  # what an older server gets
    try:
        again = health_tips.run(backend=backend)
        again.sync()  # run() returns at once: the join must happen before the flag is restored
    finally:
        backend._concat_supported = True
    assert _joined_text(again) == joined  # greedy branches; the summary may differ (it sees other KV)
    assert again.get_meta_info("summary")["cached_tokens"] <= len(encode(trunk_and_first))


@pytest.mark.slow
def test_runtime_endpoint_reuses_the_concatenated_kv_of_a_live_server():
    from sglang.runtime.loader.tokenizer import load_tokenizer

    runtime = sgl.Runtime(device="cpu", launch_timeout=600, log_level="warning")
    try:
        tokenizer = load_tokenizer(Path(runtime.endpoint.model_info["tokenizer_path"]))
        _check_reuse(runtime.endpoint, tokenizer.encode)
    finally:
        runtime.shutdown()


@pytest.mark.slow
def test_engine_backend_reuses_the_concatenated_kv_of_an_in_process_engine():
    engine = sgl.Engine(device="cpu", log_level="warning")
    try:
        _check_reuse(sgl.EngineBackend(engine), engine.tokenizer.encode)
        out = engine.concat_and_append("Tips:\n", ["1. Sleep.\n", "2. Walk.\n"])
        assert out["ok"], out["reason"]
        assert out["cached_tokens"] == len(out["input_ids"]) == out["text_match_tokens"]
    finally:
        engine.shutdown()
