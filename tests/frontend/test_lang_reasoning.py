"""separate_reasoning: thinking split from the answer, in the variable and in the text."""

from __future__ import annotations

import pytest

import sglang as sgl
from sglang.frontend.reasoning import split_reasoning

from .scripted_backend import ScriptedBackend


def test_split_reasoning_formats():
    assert split_reasoning("<think>hmm</think> 42") == ("hmm", "42")
    assert split_reasoning("hmm</think>42", "deepseek-r1") == ("hmm", "42")  # opening tag in the template
    assert split_reasoning("just 42", "qwen3") == ("", "just 42")
    assert split_reasoning("<think>still thinking", "qwen3") == ("still thinking", "")
    with pytest.raises(ValueError, match="known"):
        split_reasoning("x", "nope")


def test_separate_reasoning_in_a_program():
    @sgl.function
    def prog(s):
        s += sgl.user("6*7?")
        s += sgl.assistant(sgl.separate_reasoning(sgl.gen("answer"), model_type="deepseek-r1"))

    state = prog.run(backend=ScriptedBackend(lambda p, _: "<think>six sevens</think>42"))
    assert state["answer"] == "42"
    assert state["answer_reasoning_content"] == "six sevens"
    assert state.text() == "USER:6*7?\nASSISTANT:42\n"
    assert state.messages()[-1] == {"role": "assistant", "content": "42"}
