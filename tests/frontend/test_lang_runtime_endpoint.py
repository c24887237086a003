"""Protocol tests: RuntimeEndpoint against a real local HTTP server that answers like SGLang."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.backend.native import choice_token_logprobs
from sglang.frontend.jinja_template import JinjaChatTemplate
from sglang.frontend.sampling_params import REGEX_INT

from .fake_servers import FakeSGLangServer

PROMPT = "Q: pick\nA:"

# A chatml template that injects a default system prompt, like SmolLM2-Instruct's.
CHATML_JINJA = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nBe brief.<|im_end|>\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture
def server():
    with FakeSGLangServer() as srv:
        yield srv


@sgl.function
def pick(s, method):
    s += PROMPT + sgl.select("fruit", ["apple", "kiwi"], choices_method=method)


def _select(server, method):
    backend = sgl.RuntimeEndpoint(server.url)
    state = pick.run(method=method, backend=backend)
    state.sync()  # run() returns at once; the stream executes in the background
    return state, server.posts("/generate")


def test_select_makes_one_prefill_then_one_batched_scoring_request(server):
    state, posts = _select(server, sgl.token_length_normalized)
    assert len(posts) == 2
    assert posts[0] == {"text": PROMPT, "sampling_params": {"max_new_tokens": 0}}
    assert posts[1] == {
        "text": [PROMPT + "apple", PROMPT + "kiwi"],
        "sampling_params": {"max_new_tokens": 0, "temperature": 0},
        "return_logprob": True,
        "return_text_in_logprobs": True,
        "logprob_start_len": len(PROMPT) - 2,  # the fake tokenizes by character; 2 tokens of healing
    }
    # Scored over the choice's own tokens only: kiwi's mean logprob (-0.7) beats apple's (-0.78).
    assert state["fruit"] == "kiwi"
    meta = state.get_meta_info("fruit")
    assert [len(t) for t in meta["input_token_logprobs"]] == [5, 4]
    assert meta["normalized_prompt_logprobs"] == pytest.approx([-0.78, -0.7])
    assert state.text() == PROMPT + "kiwi"


def test_select_scores_the_tokens_a_choice_merged_with_the_prompts_end():
    # "A: " is [..., ":", " "] alone but [..., ":", " Paris"] with the choice: the healed token
    # " Paris" carries the choice and is scored; ":" ends inside the prompt and is not.
    entries = [[-0.5, 1, "A"], [-0.1, 2, ":"], [-2.0, 3, " Paris"]]
    assert choice_token_logprobs(entries, "Q: x?\nA: ", "Q: x?\nA: Paris", 2) == [[-2.0, 3, " Paris"]]
    split = [[-0.5, 1, "A"], [-0.1, 2, ":"], [-0.2, 3, " "], [-1.0, 4, "Os"], [-0.3, 5, "aka"]]
    assert choice_token_logprobs(split[1:], "A: ", "A: Osaka", 2) == split[3:]
    # Token texts that do not spell the text (a character split across tokens): drop by count.
    odd = [[-0.1, 2, ":"], [-0.2, 3, " "], [-1.0, 4, "\ufffd"]]
    assert choice_token_logprobs(odd, "A: ", "A: é", 2) == odd[2:]


def test_select_greedy_uses_the_same_two_requests(server):
    state, posts = _select(server, sgl.greedy_token_selection)
    assert len(posts) == 2
    assert state["fruit"] == "apple"  # first token: 'a' (-0.1) beats 'k' (-1.2)


def test_select_unconditional_adds_one_request_scoring_choice_tokens_alone(server):
    state, posts = _select(server, sgl.unconditional_likelihood_normalized)
    assert len(posts) == 3
    assert posts[2]["input_ids"] == [[ord(c) for c in "apple"], [ord(c) for c in "kiwi"]]
    assert posts[2]["logprob_start_len"] == 0 and posts[2]["return_logprob"] is True
    assert state["fruit"] == "apple"  # mean gain over unconditional: apple -0.02, kiwi -0.3


def test_generate_request_shape_and_meta_info(server):
    @sgl.function
    def prog(s):
        s += "Hi" + sgl.gen("x", max_tokens=5, stop=["\n"], temperature=0, top_k=3)
        s += sgl.gen("n", dtype=int, max_tokens=4)

    state = prog.run(backend=sgl.RuntimeEndpoint(server.url), temperature=0.5)
    state.sync()
    first, second = server.posts("/generate")
    assert first["text"] == "Hi"
    assert "stream" not in first and "return_logprob" not in first
    params = first["sampling_params"]
    assert params["max_new_tokens"] == 5 and params["stop"] == ["\n"]
    assert params["temperature"] == 0 and params["top_k"] == 3 and params["top_p"] == 1.0
    assert params["skip_special_tokens"] is True and "regex" not in params
    assert second["sampling_params"]["regex"] == REGEX_INT
    assert second["sampling_params"]["stop"] == [" ", "\n"]
    assert second["sampling_params"]["temperature"] == 0.5  # the run() default
    assert state["x"] == "Hello"
    assert state.get_meta_info("x")["completion_tokens"] == 5
    assert state.text() == "HiHelloHell"


def test_streamed_generation_reads_sse_until_done(server):
    @sgl.function
    def prog(s):
        s += "Say:" + sgl.gen("x", max_tokens=5)

    state = prog.run(backend=sgl.RuntimeEndpoint(server.url), stream=True)
    assert "".join(state.text_iter("x")) == "Hello"
    assert server.posts("/generate")[0]["stream"] is True
    assert state.text() == "Say:Hello"


def test_model_chat_template_comes_from_get_model_info():
    with FakeSGLangServer(chat_template=CHATML_JINJA) as srv:
        backend = sgl.RuntimeEndpoint(srv.url)
        assert isinstance(backend.get_chat_template(), JinjaChatTemplate)

        @sgl.function
        def chat(s):
            s += sgl.user("Hi")
            s += sgl.assistant(sgl.gen("a", max_tokens=2))

        state = chat.run(backend=backend)
        state.sync()
        expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        assert srv.posts("/generate")[0]["text"] == expected
        assert state.text() == expected + "He<|im_end|>\n"
        assert state.messages() == [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "He"}]


def test_named_template_overrides_the_model_one():
    with FakeSGLangServer(chat_template=CHATML_JINJA) as srv:
        backend = sgl.RuntimeEndpoint(srv.url, chat_template_name="llama-3-instruct")
        assert backend.get_chat_template().name == "llama-3-instruct"


def test_run_batch_prefills_the_constant_prefix_first(server):
    preamble = "You are a careful assistant. Answer every question in one short sentence.\n"

    @sgl.function
    def qa(s, question):
        s += preamble + "Q: " + question + "\nA:" + sgl.gen("a", max_tokens=3)

    states = qa.run_batch([{"question": q} for q in ("x", "y", "z")], backend=sgl.RuntimeEndpoint(server.url))
    posts = server.posts("/generate")
    assert posts[0] == {"text": preamble + "Q: ", "sampling_params": {"max_new_tokens": 0}}
    assert sorted(p["text"] for p in posts[1:]) == [preamble + f"Q: {q}\nA:" for q in "xyz"]
    assert [s["a"] for s in states] == ["Hel"] * 3


def test_fork_prefills_the_shared_text_before_the_branches(server):
    @sgl.function
    def branches(s):
        s += "Story:"
        forks = s.fork(2)
        forks += sgl.gen("end", max_tokens=2)
        forks.join()

    state = branches.run(backend=sgl.RuntimeEndpoint(server.url))
    state.sync()
    assert state["end"] == ["He", "He"]
    posts = server.posts("/generate")
    assert posts[0] == {"text": "Story:", "sampling_params": {"max_new_tokens": 0}}
    assert [p["text"] for p in posts[1:]] == ["Story:", "Story:"]


def test_flush_cache_and_server_info(server):
    backend = sgl.RuntimeEndpoint(server.url)
    sgl.flush_cache(backend)
    assert ("/flush_cache", None) in server.requests
    assert sgl.get_server_info(backend) == {"version": "fake"}


def test_server_error_surfaces_as_program_error():
    @sgl.function
    def prog(s):
        s += "x" + sgl.gen("a")

    with FakeSGLangServer(fail_generate=True) as srv:
        state = prog.run(backend=sgl.RuntimeEndpoint(srv.url))
        with pytest.raises(sgl.ProgramError, match="answered 400") as info:
            state["a"]
    assert "generate" in str(info.value)  # the program stream's traceback is in the message
