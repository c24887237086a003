"""The OpenAI backend against a real local OpenAI-compatible HTTP server."""

from __future__ import annotations

import pytest

import sglang as sgl

from .fake_servers import FakeOpenAIServer, char_logprob


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def test_chat_model_gets_the_messages(server):
    backend = sgl.OpenAI("my-chat", base_url=server.url + "/v1", api_key="k")

    @sgl.function
    def chat(s):
        s += sgl.system("Be brief.")
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("a", max_tokens=7, top_k=5))

    state = chat.run(backend=backend, temperature=0)
    assert state["a"] == "Sure thing"
    (body,) = server.posts("/v1/chat/completions")
    assert body["model"] == "my-chat"
    assert body["messages"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    assert (body["max_tokens"], body["temperature"], body["top_k"]) == (7, 0, 5)
    assert "min_p" not in body and "regex" not in body  # extras only when asked for
    assert backend.token_usage.prompt_tokens == 3
    backend.token_usage.reset()  # upstream's API, as its speculative-execution tests use it
    assert (backend.token_usage.prompt_tokens, backend.token_usage.completion_tokens) == (0, 0)


def test_chat_model_gen_outside_the_assistant_turn_is_a_clear_error(server):
    backend = sgl.OpenAI("my-chat", base_url=server.url + "/v1")

    @sgl.function
    def bad(s):
        s += sgl.user("Hi") + sgl.gen("a")

    with pytest.raises(sgl.ProgramError, match="must start the assistant message"):
        bad.run(backend=backend)["a"]


def test_chat_streaming(server):
    backend = sgl.OpenAI("my-chat", base_url=server.url + "/v1")

    @sgl.function
    def chat(s):
        s += sgl.user("Hi")
        s += sgl.assistant(sgl.gen("a"))

    state = chat.run(backend=backend, stream=True)
    assert "".join(state.text_iter("a")) == "Surething"  # the fake streams the words without spaces


def test_completion_model_gets_the_text_and_selects_in_one_request(server):
    backend = sgl.OpenAI("gpt-3.5-turbo-instruct", base_url=server.url + "/v1")
    assert not backend.is_chat_model

    @sgl.function
    def prog(s):
        s += "Q:" + sgl.gen("a", dtype=int) + "\nA:" + sgl.select("fruit", ["apple", "kiwi"])

    state = prog.run(backend=backend)
    assert state["fruit"] == "kiwi"  # mean char logprob -0.7 beats apple's -0.78
    plain, scoring = server.posts("/v1/completions")
    assert plain["prompt"] == "Q:" and plain["regex"] == sgl.frontend.sampling_params.REGEX_INT
    prefix = "Q:Sure thing\nA:"
    assert scoring["prompt"] == [prefix + "apple", prefix + "kiwi"]
    assert scoring["echo"] is True and scoring["logprobs"] == 1
    lps = state.get_meta_info("fruit")["input_token_logprobs"]
    assert [t for _, _, t in lps[1]] == list("kiwi")
    assert [lp for lp, _, _ in lps[1]] == [char_logprob(c) for c in "kiwi"]


def test_select_without_prompt_logprobs_is_a_clear_error():
    with FakeOpenAIServer(echo=False) as srv:
        backend = sgl.OpenAI("gpt-3.5-turbo-instruct", base_url=srv.url + "/v1")

        @sgl.function
        def prog(s):
            s += "A:" + sgl.select("x", ["a", "b"])

        with pytest.raises(sgl.ProgramError, match="needs prompt logprobs"):
            prog.run(backend=backend)["x"]
